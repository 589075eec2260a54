// One degree's plan search in stages (DegreeSearch), and the searches of several tensor- or expert-parallel degrees
// run stage by stage with one incumbent (search_degrees, Note [Shared incumbent]). Internal to planner/: search.cpp
// and search_2d.cpp drive it.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "search.h"

namespace shardplan::search_internal {

class Searcher;

// Note [Shared incumbent]: the fastest fitting plan of any degree prunes every degree's search — a setting whose
// step floor is above it is proven without its wrap search, a wrapping whose modelled step is above it is never
// simulated (SearchOptions::known_step_s). A degree searched whole before the next (one-ahead wrappings, tightened
// floors, prefetch depths) prunes the next only with its final answer, and the first degree searched — the one whose
// seed plan was fastest (Note [Degree order] in search_2d.cpp), not always the one whose answer is — runs unpruned:
// llama3.1-405b on 256x8 H100s searched TP 4 first (its seed 47.2 s) for 1.6 of 2.3 s, where TP 2's answer (45.3 s)
// would have proven most of TP 4's settings. So the degrees run stage by stage: every degree's one-ahead pass as one
// (Note [Joint setting order] in searcher.h), then each degree's tightened-floor pass in order (the cheap part that
// finds each degree's answer or close to it), each pruned by the best plan found so far and the degrees' refined
// answers before it; then, degree by degree, the prefetch-depth pass (the costly
// part, whose bound takes gathers as free), the offload last resort where no degree has a plan that fits so far, and
// the refinements — each pruned by the best plan of every degree's wrappings and of the degrees finished before it
// (the refinements improve an answer by up to 1 %: llama3-70b on 256x8 H100s, TP 2's 8.155 s refined to 8.095 s
// before TP 4's depth pass). The stages and their order do not depend on the thread count (each degree's settings
// run in waves on the threads, Note [Setting waves]), so neither does the result. What each degree reports is its
// own search's: a degree pruned by another's faster plan may report no plan, or a plan slower than that one — never
// a faster plan than its full search would have found, as pruning only skips what cannot beat the incumbent.
class DegreeSearch {
 public:
  // Validates the training against the model (InputError) and sets up the searcher; nothing searched yet.
  DegreeSearch(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
               const TrainingConfig& training, const SearchOptions& options);
  ~DegreeSearch();
  DegreeSearch(const DegreeSearch&) = delete;
  DegreeSearch& operator=(const DegreeSearch&) = delete;

  // Stage 1: the one-ahead and tightened-floor passes of the settings without offload, pruned by `known_step_s` too.
  void search_wrappings(double known_step_s);
  // Stage 1 in two parts, for degrees searched together (Note [Joint setting order] in searcher.h): the searcher
  // whose one-ahead pass run_one_ahead_jointly runs with the others', then the tightened-floor pass after it.
  Searcher& searcher() { return *searcher_; }
  void search_tightened_floors(double known_step_s);
  // Stage 2: the prefetch-depth pass, pruned by `known_step_s` too; then, where no plan of this search fits and none
  // is known (known_step_s infinite), the offload settings as the last resort.
  void search_prefetch_depths(double known_step_s);
  // Stage 3: the baselines, the refinements of the best plans, the infeasibility diagnosis; the result.
  SearchResult finish();

  // The fastest fitting plan found so far (infinity: none).
  double best_step_s() const;

 private:
  const ModelSpec& model_;
  const Cluster& cluster_;
  const HardwareProfile& profile_;
  const TrainingConfig& training_;
  const SearchOptions& options_;
  // Note [Refining unproven settings] (degree_search.cpp): a plan's variants the wrap search does not model, simulated.
  void refine(const PlanCandidate& base);

  double seconds_ = 0;  // searching so far
  std::vector<std::pair<std::string, double>> refined_;  // the plans refined so far and their variants: knobs, step
  SearchResult result_;
  std::unique_ptr<Searcher> searcher_;
};

// One degree's search, all stages (search_fsdp_plans for one degree).
SearchResult search_one_degree(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                               const TrainingConfig& training, const SearchOptions& options);

// What search_degrees takes for one degree; the references must outlive the call.
struct DegreeInput {
  const ModelSpec& model;
  const Cluster& cluster;
  const TrainingConfig& training;
  const SearchOptions& options;
};
// One degree's outcome: its result, or what its search threw (then no result).
struct DegreeOutcome {
  std::optional<SearchResult> result;
  std::exception_ptr failure;
};
// Note [Shared incumbent]: the degrees' searches stage by stage, in the given order, with one incumbent (objective
// time; for --objective memory each runs on its own). A degree whose search throws drops out; its exception is kept.
std::vector<DegreeOutcome> search_degrees(const std::vector<DegreeInput>& degrees, const HardwareProfile& profile);

}  // namespace shardplan::search_internal
