// search_plans over tensor-parallel degrees: each degree's FSDP search on its data-parallel view (Note [2-D plans]).
#include "search.h"

#include <chrono>

#include "errors.h"
#include "tensor_parallel_view.h"

namespace shardplan {
namespace {

bool better(const PlanCandidate& candidate, const PlanCandidate& best, SearchObjective objective) {
  if (objective == SearchObjective::memory) {
    return candidate.summary.peak_memory_bytes < best.summary.peak_memory_bytes;
  }
  // Every degree runs the same global batch (Note [Equal global batch]): throughput orders them as step time does.
  return candidate.summary.tokens_per_s > best.summary.tokens_per_s;
}

}  // namespace

SearchResult search_plans(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                          const TrainingConfig& training, const SearchOptions& options) {
  std::vector<int> degrees;
  for (int degree : options.tensor_parallel_degrees) {
    if (degree == 1) {
      degrees.push_back(1);
      continue;
    }
    try {
      validate_tensor_parallel_degree(degree, model, cluster.world_size(), cluster.gpus_per_node, "--tensor-parallel");
      degrees.push_back(degree);
    } catch (const InputError&) {
      // A degree this model or node cannot take is not a candidate (the user's explicit single degree is checked by
      // the CLI before it gets here).
    }
  }
  if (degrees.empty() || degrees == std::vector<int>{1}) return search_fsdp_plans(model, cluster, profile, training, options);
  const auto started = std::chrono::steady_clock::now();
  SearchResult result;
  bool have_result = false;
  std::size_t evaluated = 0;
  for (int degree : degrees) {
    SearchOptions view_options = options;
    view_options.tensor_parallel_degrees = {1};
    // Only plans faster than the best degree so far are wanted (SearchOptions::known_step_s): its floors prune.
    if (have_result && result.feasible && options.objective == SearchObjective::time) {
      view_options.known_step_s = std::min(options.known_step_s, result.best.summary.step_time_s);
    }
    SearchResult found;
    if (degree == 1) {
      found = search_fsdp_plans(model, cluster, profile, training, view_options);
    } else {
      // Offload with TP is not yet supported (validate_plan); baselines are FSDP's auto-wrap policies (degree 1).
      view_options.allow_offload = false;
      view_options.with_baselines = false;
      Cluster view_cluster = cluster;
      view_cluster.gpus_per_node = cluster.gpus_per_node / degree;
      const ModelSpec view_model = tensor_parallel_shard(model, pytorch_tensor_parallel(degree));
      // Note [Equal global batch]: the user's global batch is never changed. Without --global-batch it is the
      // baselines' (FSDP alone: one micro-batch per rank, world × micro-batch sequences); this degree has world /
      // degree data-parallel ranks, so each runs degree × the sequences — as a larger micro-batch or as gradient
      // accumulation (knob_settings: searched unless --micro-batch pins it). Comparing plans at unequal batches
      // made a TP plan of half the sequences look twice as fast (issue 31, item 5).
      TrainingConfig view_training = training;
      if (view_training.global_batch == 0) view_training.global_batch = training.micro_batch * cluster.world_size();
      try {
        found = search_fsdp_plans(view_model, view_cluster, profile, view_training, view_options);
      } catch (const InputError&) {
        continue;  // e.g. a global batch the data-parallel ranks of this degree do not divide
      }
      found.best.plan.tensor_parallel_degree = degree;
      found.best.knobs = "TP " + std::to_string(degree) + ", " + found.best.knobs;
    }
    evaluated += found.candidates_evaluated;
    if (!have_result || (found.feasible && (!result.feasible || better(found.best, result.best, options.objective)))) {
      std::vector<BaselineResult> baselines = std::move(result.baselines);
      const InfeasibleDiagnosis diagnosis = result.diagnosis;
      result = std::move(found);
      if (have_result) {
        if (result.baselines.empty()) result.baselines = std::move(baselines);
        if (result.diagnosis.dominant_term.empty()) result.diagnosis = diagnosis;
      }
      have_result = true;
    } else if (degree == 1) {
      result.baselines = std::move(found.baselines);
    }
  }
  // A single TP degree's search ran without FSDP's auto-wrap baselines (degree-1 plans): compare against them still.
  if (options.with_baselines && result.baselines.empty()) {
    result.baselines = baseline_plans(model, cluster, profile, training, result.usable_memory_bytes());
  }
  result.candidates_evaluated = evaluated;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace shardplan
