// `plan`'s pipeline parallelism (plan_pipeline.h): flags, the search request, and the pipeline plan's output.
#include "plan_pipeline.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "errors.h"
#include "pipeline_schedule.h"
#include "plan_json.h"
#include "search_context_parallel.h"
#include "step_analysis.h"

namespace shardplan::cli {

void add_pipeline_plan_flags(CLI::App& command, PipelinePlanFlags& flags) {
  command.add_option("--pipeline-parallel", flags.pipeline_parallel,
                     "pipeline ranks (pp) of the plan, torchtitan's stage split (Note [Pipeline search]); 1: none; "
                     "omitted: searched (2, 4, 8, ... beside FSDP alone)")
      ->check(CLI::Range(1, 1 << 20));
  command.add_option("--pipeline-schedule", flags.schedule,
                     "GPipe | 1F1B | Interleaved1F1B | InterleavedZeroBubble (torch.distributed.pipelining's "
                     "names); omitted: 1F1B, Interleaved1F1B and (without checkpointing) InterleavedZeroBubble "
                     "searched");
  command.add_option("--stages-per-rank", flags.stages_per_rank,
                     "virtual stages per pipeline rank (Interleaved1F1B: 2 or more); omitted: Interleaved1F1B's 2, 4 "
                     "and 8 searched (while each stage keeps 2 layers), 2 for InterleavedZeroBubble")
      ->check(CLI::Range(1, 1 << 10));
}

PipelineSearchRequest pipeline_search_request(const PipelinePlanFlags& flags, const ModelSpec& model,
                                              const Cluster& cluster, const TrainingConfig& training,
                                              const SearchOptions& search,
                                              const std::string& export_format, int context_parallel,
                                              std::int64_t usable_bytes) {
  PipelineSearchRequest request;
  request.pinned = flags.pipeline_parallel > 1;
  // Why no pipeline plan can be the answer of this command; a pinned degree refuses it in one line.
  std::string conflict;
  if (search.objective != SearchObjective::time) conflict = "--objective memory (pipeline plans: time only)";
  if (!export_format.empty() && export_format != "torchtitan") {
    conflict = "--export " + export_format + " (it writes no pipeline plan; torchtitan does)";
  }
  if (std::string model_conflict = pipeline_model_conflict(model, training, search.pins); !model_conflict.empty()) {
    conflict = std::move(model_conflict);
  }
  if (request.pinned && !conflict.empty()) {
    throw InputError("--pipeline-parallel " + std::to_string(flags.pipeline_parallel) + ": not with " + conflict);
  }
  if (flags.pipeline_parallel == 1) {
    request.skipped = "--pipeline-parallel 1";
  } else if (!conflict.empty()) {
    request.skipped = conflict;
  }
  PipelineSearchOptions& options = request.options;
  if (request.pinned) {
    if (cluster.world_size() % flags.pipeline_parallel != 0) {
      throw InputError("--pipeline-parallel " + std::to_string(flags.pipeline_parallel) +
                       ": expected a degree that divides the " + std::to_string(cluster.world_size()) + " GPUs");
    }
    options.pipeline_degrees = {flags.pipeline_parallel};
  } else {
    options.pipeline_degrees = pipeline_degree_candidates(model, cluster);
    if (request.skipped.empty() && options.pipeline_degrees.empty()) {
      request.skipped = "no pipeline degree fits this model and cluster";
    }
  }
  if (!flags.schedule.empty()) {
    options.schedule = pipeline_schedule_from_string(flags.schedule, "--pipeline-schedule");
  }
  if (flags.stages_per_rank > 0 && !options.schedule) {
    throw InputError("--stages-per-rank: expected with --pipeline-schedule (which schedule the stages are for)");
  }
  options.stages_per_rank = flags.stages_per_rank;
  options.tensor_parallel_degrees = search.tensor_parallel_degrees;
  options.expert_parallel_degrees = search.expert_parallel_degrees.empty() ? std::vector<int>{1}
                                                                           : search.expert_parallel_degrees;
  options.pins = search.pins;
  options.usable_bytes = usable_bytes;
  options.threads = search.threads;
  options.floor_cache = search.floor_cache;  // Note [Shared setting floors]: FSDP's searches lowered them already
  // A pinned degree, or 1 and those Note [Context-parallel search] tries (planner/search_context_parallel.h).
  options.context_parallel_degrees = {std::max(1, context_parallel)};
  if (context_parallel == 0) {
    for (const int degree : context_parallel_candidates(model, cluster, training)) {
      options.context_parallel_degrees.push_back(degree);
    }
  }
  return request;
}

std::string render_pipeline_plan_text(const PipelineSearchResult& result, const Cluster& cluster,
                                      const MemoryHeadroom& headroom) {
  const PipelineCandidate& best = result.best;
  const Plan& plan = best.plan;
  std::ostringstream out;
  out << "planned: " << best.knobs << ", one unit per block\n";
  const ParallelDims dims = parallel_dims(plan, cluster.world_size());
  out << "  " << to_string(dims) << "\n";
  // The data-parallel ranks less cp: a CP group shares its sequences.
  const std::int64_t sequences =
      plan.training.micro_batch * plan.grad_accumulation_steps * (dims.data_parallel_world_size() / dims.cp());
  out << "  global batch " << sequences << " sequences (" << best.analysis.simulation.tokens_per_step
      << " tokens) per step\n";
  std::istringstream table(render_pipeline_text(best.analysis, headroom));
  for (std::string line; std::getline(table, line);) out << "  " << line << "\n";
  return out.str();
}

std::string render_pipeline_search_line(const PipelineSearchRequest& request, const PipelineSearchResult& result,
                                        bool beside_fsdp_plan) {
  if (!request.skipped.empty()) return "pipeline plans: not searched (" + request.skipped + ")\n";
  const bool cp_searched = result.context_parallel_degrees.size() > 1;
  const bool ep_searched = result.expert_parallel_degrees.size() > 1;
  char line[512];
  std::snprintf(line, sizeof line,
                "pipeline plans: %zu candidates (pp x schedule x TP x checkpointing x micro-batch%s%s) and "
                "%zu balanced stage split%s, %zu simulated, %zu proven no faster and %zu unable to fit by their "
                "floors, %zu refused, in %.3f s; %s (Note [Pipeline search]: the fastest fitting of this grid; "
                "wrapping, strategy and prefetch as torchtitan sets them)\n",
                result.candidates, cp_searched ? " x CP" : "", ep_searched ? " x EP" : "", result.balanced_splits,
                result.balanced_splits == 1 ? "" : "s", result.simulated, result.beaten_by_floor,
                result.over_memory_floor, result.refused, result.seconds,
                result.feasible     ? "a pipeline plan is the fastest"
                : beside_fsdp_plan ? "none beats the plan above"
                                   : "none fits");
  std::string text = line;
  // A pinned degree with no plan: why its points were refused (the reasons first met, each once).
  if (request.pinned && !result.feasible && !result.refusal_reasons.empty()) {
    text += "  refused: ";
    for (std::size_t index = 0; index < result.refusal_reasons.size(); ++index) {
      text += (index > 0 ? "; " : "") + result.refusal_reasons[index];
    }
    text += result.refused > result.refusal_reasons.size() ? " (and the like)\n" : "\n";
  }
  return text;
}

nlohmann::json pipeline_search_json(const PipelineSearchRequest& request, const PipelineSearchResult& result,
                                    const ModelSpec& model, const MemoryHeadroom& headroom) {
  nlohmann::json document;
  document["searched"] = request.skipped.empty();
  if (!request.skipped.empty()) document["skipped"] = request.skipped;
  document["pinned"] = request.pinned;
  document["context_parallel_degrees"] = result.context_parallel_degrees;
  document["expert_parallel_degrees"] = result.expert_parallel_degrees;
  document["candidates"] = result.candidates;
  document["balanced_splits"] = result.balanced_splits;
  document["simulated"] = result.simulated;
  document["beaten_by_floor"] = result.beaten_by_floor;
  document["over_memory_floor"] = result.over_memory_floor;
  document["refused"] = result.refused;
  document["refusal_reasons"] = result.refusal_reasons;
  document["seconds"] = result.seconds;
  if (result.feasible) {
    document["planned"] = {{"knobs", result.best.knobs},
                           {"plan", to_json(result.best.plan, model)},
                           {"simulation", to_json(result.best.analysis, headroom)}};
  }
  return document;
}

}  // namespace shardplan::cli
