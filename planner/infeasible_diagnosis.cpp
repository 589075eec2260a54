// The infeasibility diagnosis of the plan search: the dominant memory term and the cheapest changes that would fit.
#include "infeasible_diagnosis.h"

#include <cmath>
#include <cstdio>

#include "host_memory.h"
#include "memory_headroom.h"
#include "step_analysis.h"

namespace shardplan {
namespace {

std::string gib_text(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// Note [Host memory]: the leanest offload plan fits the GPUs but its offloaded states do not fit a node's host
// memory. Said first, with what would fit: nodes with more host memory, or more nodes (each holds fewer shards).
void diagnose_host_memory(InfeasibleDiagnosis& diagnosis, const ModelSpec& model, const Cluster& cluster,
                          const TrainingConfig& lean, const PlanCandidate& lean_offload, std::int64_t cap) {
  const HostMemoryUse use = host_memory_use(lean_offload.plan, model, cluster);
  // The least-memory plan fits the GPUs here (the offload plan does), so its line would read as a fit.
  diagnosis.suggestions.erase(diagnosis.suggestions.begin());
  diagnosis.host_memory_limited = true;
  diagnosis.host_memory = use;
  diagnosis.dominant_term = "host_memory";
  std::vector<std::string> host;
  host.push_back("with CPU offload (" + lean_offload.knobs + ") the GPUs need " +
                 gib_text(lean_offload.summary.peak_memory_bytes) + " of " + gib_text(cap) +
                 ", but the offloaded parameters, gradients and optimizer states need " +
                 host_bytes_text(use.per_node_bytes) + " of pinned host memory per node (" +
                 std::to_string(cluster.gpus_per_node) + " x " + host_bytes_text(use.per_rank_bytes) +
                 ") and a node has " + host_bytes_text(use.node_bytes));
  const double gib_needed = std::ceil(static_cast<double>(use.per_node_bytes) / (1024.0 * 1024.0 * 1024.0));
  host.push_back("nodes with at least " + host_bytes_text(use.per_node_bytes) +
                 " of host memory (a cluster JSON's \"host_memory_gib_per_node\": " +
                 std::to_string(static_cast<long long>(gib_needed)) + ")");
  for (int nodes = cluster.nodes * 2; nodes <= cluster.nodes * 1024; nodes *= 2) {
    Cluster bigger = cluster;
    bigger.nodes = nodes;
    const KnobSetting knobs{ShardingStrategy{}, "full", 1, true};
    const HostMemoryUse spread = host_memory_use(plan_for_knobs(model, bigger, lean, knobs), model, bigger);
    if (spread.fits()) {
      host.push_back("use " + std::to_string(bigger.world_size()) + " GPUs (" + std::to_string(nodes) +
                     " nodes of " + std::to_string(cluster.gpus_per_node) + "): the offloaded states then need " +
                     host_bytes_text(spread.per_node_bytes) + " per node");
      break;
    }
  }
  diagnosis.suggestions.insert(diagnosis.suggestions.begin(), host.begin(), host.end());
}

}  // namespace

InfeasibleDiagnosis diagnose(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                             const TrainingConfig& training, const PlanCandidate& smallest,
                             const PlanCandidate* lean_offload, std::int64_t cap) {
  InfeasibleDiagnosis diagnosis;
  diagnosis.smallest_peak_bytes = smallest.summary.peak_memory_bytes;
  std::size_t dominant = 0;
  for (std::size_t category = 0; category < kMemoryCategoryCount; ++category) {
    if (smallest.summary.memory_at_peak[category] > smallest.summary.memory_at_peak[dominant]) dominant = category;
  }
  diagnosis.dominant_term = std::string(kMemoryCategoryNames[dominant]);
  // More GPUs of this type: the smallest whole number of nodes (doubling) at which the least-memory plan fits.
  TrainingConfig lean = training;
  lean.micro_batch = 1;
  lean.global_batch = 0;
  lean.checkpointing = ActivationCheckpointing::full;
  for (int nodes = cluster.nodes * 2; nodes <= cluster.nodes * 1024; nodes *= 2) {
    Cluster bigger = cluster;
    bigger.nodes = nodes;
    const Plan plan = default_plan(model, lean, {}, wrap_per_block(model), bigger.world_size());
    const auto summary = analyze_step(model, bigger, profile, plan, false).simulation.summary;
    if (fits_in_memory(summary, cap)) {
      diagnosis.suggestions.push_back("use " + std::to_string(bigger.world_size()) + " GPUs (" +
                                      std::to_string(nodes) + " nodes of " + std::to_string(cluster.gpus_per_node) +
                                      "): full_shard with full AC and micro-batch 1 then needs " +
                                      gib_text(summary.device_peak_bytes));
      break;
    }
  }
  const std::string smallest_text = "the least-memory plan here (" + smallest.knobs + ") needs " +
                                    gib_text(smallest.summary.device_peak_bytes) + " (reserved + overhead) of " +
                                    gib_text(cap) + " (the cap less the headroom)";
  diagnosis.suggestions.insert(diagnosis.suggestions.begin(), smallest_text);
  if (training.seq_len > 1024) {
    diagnosis.suggestions.push_back("shorter sequences: activations scale with --seq-len " +
                                    std::to_string(training.seq_len));
  }
  if (training.precision.name == "fp32") diagnosis.suggestions.push_back("--precision bf16-mixed halves gathered copies");
  if (lean_offload != nullptr && fits_in_memory(lean_offload->summary, cap) &&
      !host_memory_use(lean_offload->plan, model, cluster).fits()) {
    diagnose_host_memory(diagnosis, model, cluster, lean, *lean_offload, cap);
  }
  return diagnosis;
}

}  // namespace shardplan
