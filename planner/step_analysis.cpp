// analyze_step: plan → schedule → simulation, and the human-readable simulation summary.
#include "step_analysis.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lowering.h"
#include "tensor_parallel_view.h"
#include "plan_json.h"

namespace shardplan {

StepAnalysis analyze_step(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                          const Plan& plan, bool record_timeline) {
  StepAnalysis analysis;
  LoweringOptions options;
  options.world_size = cluster.world_size();
  options.gpus_per_node = cluster.gpus_per_node;
  options.context_overhead_bytes = profile.context_overhead_bytes;
  analysis.schedule = lower_plan(plan, model, options);
  analysis.simulation = simulate(analysis.schedule, profile, record_timeline);
  std::vector<std::string> names;
  for (const auto& layer : model.layers) names.push_back(layer.name);
  auto& summary = analysis.simulation.summary;
  if (summary.peak_op_id >= 0) {
    summary.peak_op = describe_op(analysis.schedule.ops[static_cast<std::size_t>(summary.peak_op_id)],
                                  analysis.schedule, &names);
  }
  if (record_timeline) {
    for (auto& event : analysis.simulation.timeline.events) {
      event.name = describe_op(analysis.schedule.ops[static_cast<std::size_t>(event.op_id)], analysis.schedule, &names);
    }
    analysis.simulation.timeline.metadata = {{"model", model.name},
                                             {"cluster", cluster.describe()},
                                             {"plan", plan.name},
                                             {"fingerprint", trace_fingerprint(model, plan)},
                                             {"summary", to_json(analysis.simulation.summary)}};
  }
  return analysis;
}

PipelineStepAnalysis analyze_pipeline_step(const ModelSpec& model, const Cluster& cluster,
                                           const HardwareProfile& profile, const Plan& plan,
                                           bool record_timeline) {
  validate_plan(plan, model, cluster.world_size(), cluster.gpus_per_node);
  const ParallelDims dims = parallel_dims(plan, cluster.world_size());
  const DataParallelView view = data_parallel_view(plan, model, dims, cluster.gpus_per_node);
  LoweringOptions options;
  options.world_size = view.world_size();
  options.gpus_per_node = view.gpus_per_node;
  options.context_overhead_bytes = profile.context_overhead_bytes;
  const PipelineLayout layout = pipeline_layout(plan, dims);
  PipelineStepAnalysis analysis;
  analysis.schedule = lower_pipeline(view.plan, view.model, options, layout);
  analysis.simulation = simulate_pipeline(analysis.schedule, profile, record_timeline);
  if (record_timeline) {
    // A program's layer indices are its rank's held layers (its stages' concatenated, pipeline_rank_model), so each
    // program names its ops by its own stages' layers.
    std::vector<std::vector<std::string>> names(analysis.schedule.programs.size());
    for (std::size_t rank = 0; rank < names.size(); ++rank) {
      for (int stage = static_cast<int>(rank); stage < analysis.schedule.order.stage_count();
           stage += analysis.schedule.order.ranks) {
        const LayerRange& range = analysis.schedule.stage_layers.at(static_cast<std::size_t>(stage));
        for (std::size_t layer = range.begin; layer < range.end; ++layer) {
          names[rank].push_back(view.model.layers[layer].name);
        }
      }
    }
    Timeline& timeline = analysis.simulation.timeline;
    for (auto& event : timeline.events) {
      const auto rank = static_cast<std::size_t>(event.rank);
      const StepSchedule& program = analysis.schedule.programs[rank];
      event.name = describe_op(program.ops[static_cast<std::size_t>(event.op_id)], program, &names[rank]);
    }
    timeline.metadata = {{"model", model.name},
                         {"cluster", cluster.describe()},
                         {"plan", plan.name},
                         {"fingerprint", trace_fingerprint(model, plan)},
                         {"pipeline", {{"schedule", to_string(analysis.schedule.order.kind)},
                                       {"degree", analysis.schedule.order.ranks},
                                       {"step_time_s", analysis.simulation.step_time_s}}}};
  }
  return analysis;
}

std::string render_pipeline_text(const PipelineStepAnalysis& analysis, const MemoryHeadroom& headroom) {
  const PipelineSimulation& simulation = analysis.simulation;
  const PipelineOrder& order = analysis.schedule.order;
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line,
                "pipeline: %s, %d ranks x %d stages each, %d micro-batches; step %.4f s, %.0f tokens/s, MFU %.1f %%, "
                "mean bubble %.1f %%\n",
                to_string(order.kind), order.ranks, order.stages_per_rank, order.micro_batches,
                simulation.step_time_s, simulation.tokens_per_s, 100 * simulation.mfu,
                100 * simulation.bubble_fraction);
  out << line;
  // The stages and layers columns as wide as their longest entry (a rank of 8 virtual stages lists 8 of each).
  std::vector<std::pair<std::string, std::string>> columns;
  std::size_t stages_width = 10, layers_width = 16;
  for (const PipelineRankSummary& rank : simulation.ranks) {
    std::string stages, layers;
    for (int stage : rank.stages) {
      const LayerRange& range = analysis.schedule.stage_layers[static_cast<std::size_t>(stage)];
      stages += (stages.empty() ? "" : ",") + std::to_string(stage);
      layers += (layers.empty() ? "" : ",") + std::to_string(range.begin) + "-" + std::to_string(range.end - 1);
    }
    stages_width = std::max(stages_width, stages.size());
    layers_width = std::max(layers_width, layers.size());
    columns.emplace_back(std::move(stages), std::move(layers));
  }
  const auto padded = [](std::string text, std::size_t width) { return text.append(width - text.size(), ' '); };
  out << "  rank  " << padded("stages", stages_width) << "  " << padded("layers", layers_width)
      << "  compute s  bubble   peak GiB  device GiB  in flight  fits\n";
  for (std::size_t index = 0; index < simulation.ranks.size(); ++index) {
    const PipelineRankSummary& rank = simulation.ranks[index];
    const bool fits = rank.device_peak_bytes <= headroom.usable_bytes();
    char rank_text[32];
    std::snprintf(rank_text, sizeof rank_text, "  %4d  ", rank.rank);
    std::snprintf(line, sizeof line, "  %9.4f  %5.1f %%  %8.2f  %10.2f  %9d  %s\n", rank.compute_busy_s,
                  100 * rank.bubble_fraction, static_cast<double>(rank.peak_memory_bytes) / (1 << 30),
                  static_cast<double>(rank.device_peak_bytes) / (1 << 30), rank.peak_in_flight_micro_batches,
                  fits ? "yes" : "no");
    out << rank_text << padded(columns[index].first, stages_width) << "  "
        << padded(columns[index].second, layers_width) << line;
  }
  return out.str();
}

nlohmann::json to_json(const PipelineStepAnalysis& analysis, const MemoryHeadroom& headroom) {
  const PipelineSimulation& simulation = analysis.simulation;
  nlohmann::json ranks = nlohmann::json::array();
  bool fits = true;
  for (const PipelineRankSummary& rank : simulation.ranks) {
    const bool rank_fits = rank.device_peak_bytes <= headroom.usable_bytes();
    fits = fits && rank_fits;
    nlohmann::json memory = nlohmann::json::object();
    for (std::size_t category = 0; category < kMemoryCategoryCount; ++category) {
      memory[std::string(kMemoryCategoryNames[category]) + "_bytes"] = rank.memory_at_peak[category];
    }
    ranks.push_back({{"rank", rank.rank},
                     {"stages", rank.stages},
                     {"compute_time_s", rank.compute_busy_s},
                     {"p2p_time_s", rank.p2p_busy_s},
                     {"bubble_fraction", rank.bubble_fraction},
                     {"peak_memory_bytes", rank.peak_memory_bytes},
                     {"device_peak_bytes", rank.device_peak_bytes},
                     {"memory_at_peak", memory},
                     {"peak_in_flight_micro_batches", rank.peak_in_flight_micro_batches},
                     {"fits", rank_fits}});
  }
  return {{"schedule", to_string(analysis.schedule.order.kind)},
          {"degree", analysis.schedule.order.ranks},
          {"stages_per_rank", analysis.schedule.order.stages_per_rank},
          {"micro_batches", analysis.schedule.order.micro_batches},
          {"step_time_s", simulation.step_time_s},
          {"tokens_per_step", simulation.tokens_per_step},
          {"tokens_per_s", simulation.tokens_per_s},
          {"mfu", simulation.mfu},
          {"bubble_fraction", simulation.bubble_fraction},
          {"ranks", std::move(ranks)},
          {"fits", fits}};
}

nlohmann::json trace_fingerprint(const ModelSpec& model, const Plan& plan) {
  nlohmann::json plan_json = to_json(plan, model);
  plan_json.erase("name");  // a renamed copy of a plan is the same plan
  // FNV-1a 64 (Fowler, Noll, Vo; the offset basis and prime of the published definition): stable across builds and
  // platforms, unlike std::hash.
  std::uint64_t hash = 14695981039346656037ull;
  for (const unsigned char byte : plan_json.dump()) {
    hash ^= byte;
    hash *= 1099511628211ull;
  }
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(hash));
  return {{"model", model.name}, {"parameters", model.param_count()}, {"plan_digest", digest}};
}

std::string render_simulation_text(const SimulationSummary& summary, const StepSchedule& schedule,
                                   const MemoryHeadroom& headroom) {
  std::ostringstream out;
  char line[200];
  const auto gib = [](long long bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); };
  std::snprintf(line, sizeof line, "step time        %10.4f s   (%zu ops, %d micro-batch%s)\n", summary.step_time_s,
                summary.op_count, schedule.micro_batches, schedule.micro_batches == 1 ? "" : "es");
  out << line;
  std::snprintf(line, sizeof line, "compute          %10.4f s\nexposed comm     %10.4f s\n", summary.compute_time_s,
                summary.exposed_comm_s);
  out << line;
  std::snprintf(line, sizeof line, "throughput       %10.0f tokens/s   MFU %.1f%%   HFU %.1f%%\n",
                summary.tokens_per_s, 100 * summary.mfu, 100 * summary.hfu);
  out << line;
  out << "streams (busy s)";
  for (const auto& [name, busy] : summary.stream_busy_s) {
    if (busy > 0) {
      std::snprintf(line, sizeof line, "  %s %.4f", name.c_str(), busy);
      out << line;
    }
  }
  out << "\ncollectives     ";
  for (const auto& totals : summary.collectives) {
    std::snprintf(line, sizeof line, "  %s ×%d (%.2f GiB)", totals.kind.c_str(), totals.count, gib(totals.bytes));
    out << line;
  }
  std::snprintf(line, sizeof line, "\npeak memory      %10.2f GiB allocated at %s\n", gib(summary.peak_memory_bytes),
                summary.peak_op.empty() ? "step start" : summary.peak_op.c_str());
  out << line;
  // Note [Reserved memory] (memory_walk.cpp), Note [Memory headroom]: the device's peak (the caching allocator's
  // reserved peak + the overhead, what nvidia-smi shows) is what the one fits verdict compares.
  std::snprintf(line, sizeof line, "reserved         %10.2f GiB (caching allocator + overhead) of %.2f GiB: %s (%s)\n",
                gib(summary.device_peak_bytes), gib(headroom.cap_bytes),
                headroom.fits(summary) ? "fits" : "DOES NOT FIT",
                headroom.describe().c_str());
  out << line;
  for (std::size_t category = 0; category < kMemoryCategoryCount; ++category) {
    if (summary.memory_at_peak[category] == 0) continue;
    std::snprintf(line, sizeof line, "  %-18s %9.2f GiB\n", std::string(kMemoryCategoryNames[category]).c_str(),
                  gib(summary.memory_at_peak[category]));
    out << line;
  }
  return out.str();
}

}  // namespace shardplan
