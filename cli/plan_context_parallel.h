// `plan`'s context parallelism: the search on one CP rank's share of every sequence, the planned plan given its
// degree back, and the search over the degree (Note [Context-parallel search]).
#pragma once

#include <string>
#include <vector>

#include "search.h"

namespace shardplan::cli {

// What the context-parallel part of `plan` did: the planned degree, the degrees searched, or why none were.
struct ContextParallelOutcome {
  int degree = 1;
  bool pinned = false;
  std::vector<int> searched;  // degrees above 1 whose search ran
  std::string skipped;        // why the degree was not searched ("" when it was, or was pinned)
};

// The FSDP search with context parallelism: `pinned_degree` > 1 searches that degree only (Note [Fixed context
// parallel degree]); 0 searches cp 1, then 2, 4, 8 where Note [Context-parallel search] says they can help; 1: cp 1.
SearchResult search_with_context_parallel(const ModelSpec& model, const Cluster& cluster,
                                          const HardwareProfile& profile, const TrainingConfig& training,
                                          const SearchOptions& options, int pinned_degree,
                                          ContextParallelOutcome& outcome);

// One line: what was planned or searched for cp.
std::string render_context_parallel_line(const ContextParallelOutcome& outcome);

}  // namespace shardplan::cli
