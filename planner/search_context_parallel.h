// The search over context parallelism (`plan`'s and `capacity`'s): the search on one CP rank's share of every
// sequence, the planned plan given its degree back, and the search over the degree (Note [Context-parallel search]).
#pragma once

#include <string>
#include <vector>

#include "search.h"

namespace shardplan {

// What the context-parallel part of `plan` did: the planned degree, the degrees searched, or why none were.
struct ContextParallelOutcome {
  int degree = 1;
  bool pinned = false;
  std::vector<int> searched;  // degrees above 1 whose search ran
  std::string skipped;        // why the degree was not searched ("" when it was, or was pinned)
  std::vector<int> pipeline_searched;  // degrees above 1 in the pipeline search's grid (beside cp 1)
  bool feasible = true;                // a plan fits (else no degree was planned)
};

// The FSDP search with context parallelism: `pinned_degree` > 1 searches that degree only (Note [Fixed context
// parallel degree]); 0 searches cp 1, then 2, 4, 8 where Note [Context-parallel search] says they can help; 1: cp 1.
SearchResult search_with_context_parallel(const ModelSpec& model, const Cluster& cluster,
                                          const HardwareProfile& profile, const TrainingConfig& training,
                                          const SearchOptions& options, int pinned_degree,
                                          ContextParallelOutcome& outcome);

// The degrees above 1 that Note [Context-parallel search] would try for this model, world and batch: 2, 4 and 8 where
// they divide the world and the sequence (in 2·cp chunks of at least kLeastTokensPerContextRank tokens) and the model
// and batch take them; none for sequences under kLeastContextParallelTokens.
std::vector<int> context_parallel_candidates(const ModelSpec& model, const Cluster& cluster,
                                             const TrainingConfig& training);

// One line: what was planned or searched for cp.
std::string render_context_parallel_line(const ContextParallelOutcome& outcome);

}  // namespace shardplan
