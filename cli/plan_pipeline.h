// `plan`'s pipeline parallelism: its flags, the pipeline search run beside the FSDP search (Note [Pipeline search] in
// planner/search_pipeline.h), and the pipeline plan's text and JSON.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "memory_headroom.h"
#include "search.h"
#include "search_pipeline.h"

namespace shardplan::cli {

struct PipelinePlanFlags {
  int pipeline_parallel = 0;  // 0: searched; 1: none; N: pinned
  std::string schedule;       // empty: searched
  int stages_per_rank = 0;    // 0: searched (with the schedule)
};

void add_pipeline_plan_flags(CLI::App& command, PipelinePlanFlags& flags);

// What the command asks of the pipeline search.
struct PipelineSearchRequest {
  bool pinned = false;  // --pipeline-parallel above 1: only pipeline plans are wanted
  std::string skipped;  // why pipeline plans are not searched ("" when they are)
  PipelineSearchOptions options;
};

// The request for this command: pinned, searched or skipped (with why). InputError (one line naming the flags) where
// a pinned degree contradicts another flag: an export not written for pipeline plans, --objective memory,
// CPU offload, optimizer in backward, a tied model. `context_parallel`: the --context-parallel degree, fixed
// for every candidate; 0 when omitted: cp 1 and the degrees Note [Context-parallel search] tries are in the grid.
PipelineSearchRequest pipeline_search_request(const PipelinePlanFlags& flags, const ModelSpec& model,
                                              const Cluster& cluster, const TrainingConfig& training,
                                              const SearchOptions& search,
                                              const std::string& export_format, int context_parallel,
                                              std::int64_t usable_bytes);

// The planned pipeline plan: knobs, the per-rank table (render_pipeline_text), the global batch.
std::string render_pipeline_plan_text(const PipelineSearchResult& result, const Cluster& cluster,
                                      const MemoryHeadroom& headroom);
// One line: what the pipeline search did (or why it was skipped), after the FSDP search's proof;
// `beside_fsdp_plan`: an FSDP plan was found, which the grid's had to beat.
std::string render_pipeline_search_line(const PipelineSearchRequest& request, const PipelineSearchResult& result,
                                        bool beside_fsdp_plan);

// {"searched", "skipped", "pinned", "candidates", "simulated", "beaten_by_floor", "refused", "refusal_reasons",
//  "seconds", "planned": {"knobs", "plan", "simulation"} when a pipeline plan is the answer}.
nlohmann::json pipeline_search_json(const PipelineSearchRequest& request, const PipelineSearchResult& result,
                                    const ModelSpec& model, const MemoryHeadroom& headroom);

}  // namespace shardplan::cli
