// Wrap-boundary search: the fastest partition of the transformer blocks into contiguous units for one setting of
// every other knob (Note [Wrap DP]), the fastest one that fits a memory cap (Note [Wrap search]) and the one with the
// least peak (Note [Least peak]) — all scored by placing the lowered schedule's fragments with the simulator's walk.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "wrap_fragments.h"

namespace shardplan {

// Note [Wrap DP]:
// A wrapping's step is its fragments in time order (Note [Wrap fragments], Note [Fragments in time order]), each
// lowered once from a small window by the lowering and placed by the simulator's walk — there is no other model of
// the step. The DP runs from the last unit down. A label is a partial wrapping from the right end: the units from its
// leftmost placed one to the last, with every fragment that depends on them alone placed — their forwards (each from
// the idle state: the forward pass leaves every stream idle at each boundary) and, for the last micro-batch, their
// backwards as a chain from the state each left (stream free times and communication busy time, Note [Fragments]).
// Placing a unit below the leftmost (a transition) places the unit's forward, which now knows the unit it gathers
// next, and the leftmost's backward, which now knows the unit it gathers below, from the label's state; the close
// places the head and the first unit's backward with the root's reduction and the optimizer step over every placed
// unit's shard. So a complete label's cost is the walk's step time of its wrapping wherever every placement started
// from the state it really starts from (Label::exact; else a lower bound, Note [Monotone walk]).
// A state is (first block of the leftmost unit, its length, kept gathered); a label with no more cost, a state at
// least as free (Note [Monotone walk]) with the same busy streams, no more optimizer shard elements and — under a cap
// — no more shards and no more live bytes in any memory term (Note [Wrap floor]) than another is dropped: nothing that
// follows is slower or holds more from it, for an overlap slowdown s ≤ 2. Labels are also dropped by bound: the rest
// of every completion, each fragment placed from the idle state, added to the cost exceeds the step of a known
// wrapping. Both prunings keep the minimum.
struct WrapDpOptions {
  int max_unit_blocks = 8;  // units span at most this many blocks (bounds the state; the floor uses it too)
};

struct WrapDpResult {
  std::vector<LayerRange> units;  // non-root units, in layer order
  double modelled_step_s = 0;     // the fragments' step time of them
  bool exact = false;             // it is the simulator's step time
  bool found = false;
};

WrapDpResult best_wrapping(WrapFragments& fragments, const WrapDpOptions& options);

// One wrapping (units left to right) through the searches' transitions: its modelled step and floor, as the
// best-first search sees it (`exact_memory`; else as the label DP does), or for every prefetch depth (Note [Prefetch
// depth] in searcher_setting.cpp). Tests compare it with the simulator on every partition.
struct WrapEvaluation {
  double step_s = 0;             // the fragments' step time: the simulated step where `exact`
  bool exact = true;             // every fragment was placed from the state it really starts from (else a lower bound)
  std::int64_t floor_bytes = 0;  // a floor of the simulated peak (Note [Wrap floor])
};
WrapEvaluation evaluate_wrapping(WrapFragments& fragments, const std::vector<UnitChoice>& units,
                                 bool exact_memory = true, bool floor_for_any_prefetch_depth = false);

// Note [Wrap floor]: the cap is checked by the simulator itself, but every partial wrapping is first held to a floor
// of the simulated peak: the root's and the placed units' shards, the least shards the unplaced blocks can hold, and
// per micro-batch the largest live bytes of a placed fragment — its window's buffers at its placement's moments
// (where those moments are the walk's: collectives at their own speed, no micro-batch running into the next, and no
// op of the fragment that starts before its end on a stream the state holds busy; elsewhere its certainly live bytes,
// Note [Certainly live]) plus what every unit outside the window holds beside it (WrapFragments' before, span, after;
// the unplaced units by their least). Every term is live in every timing of the wrapping, so a wrapping whose floor
// exceeds the cap cannot fit. The best-first search, which knows the unit above each backward, also counts that
// unit's gradient its reduction holds (Note [Reduction buffers]) and takes each backward's live bytes from its own
// placement.

// Note [Wrap search]: the fastest wrapping that fits a memory cap. The simulated peak is not a sum of local terms
// (it depends on how long buffers wait for collectives), so the cap is checked by the simulator itself: first the
// fastest wrapping the floor allows (the label DP with the floor); then wrappings out of a best-first search in
// nondecreasing modelled step time (partial wrappings from the right end keyed by cost + the bound of the rest;
// complete ones by their time), each checked until one fits. A complete wrapping whose model is its simulated step
// (Label::exact) and fits is the fastest fitting wrapping among all with units of at most `max_unit_blocks` blocks:
// every other is modelled, so simulated, at least as slow. Where the model is only a lower bound, the search goes on
// past the first wrapping that fits, keeping the fastest simulated one, until the next key is no faster: branch and
// bound, exact for the same reason.
struct WrapCheck {
  bool fits = false;
  double step_s = 0;  // simulated
  std::int64_t peak_bytes = 0;
};

// The search's budgets. Past them it gives up and the caller falls back to the per-cap DPs.
// Wrappings the simulator is asked about that fail the cap before the search gives up (each is lowered and simulated
// whole, the search's costliest step): with an exact model the first that fits ends the search.
inline constexpr std::size_t kMaxWrapChecks = 48;
// Partial wrappings the best-first search may hold: without dominance its tree can grow exponentially. Measured at a
// budget of 20,000 (2026-12-06): the searches that finished held at most 8,873 nodes over the wrap and search unit
// tests (857 searches, 99th percentile 6,003) and 6,722 over the 21 planning commands the stops compare (14
// searches); the rest ran to the budget and gave up — 363 in the tests, 282 in those commands, 10-20 ms each on the
// large models (llama3-70b on 2048 H100s: 39 of them, 0.40 of its 1.65 CPU s). Same plans at 10,000.
inline constexpr std::size_t kMaxWrapSearchNodes = 10'000;
// And at most this many partial wrappings × blocks: a long model's tree completes a wrapping later (its wrappings
// have more units) and its nodes cost more (Note [Block budget]).
inline constexpr std::size_t kMaxWrapSearchBlockNodes = 250'000;
// Note [Block budget]: counted over the unit tests and 13 planning commands (2026-12-07), the best-first searches
// that ran after the label DP's wrapping (the simulator refusing it) and ended held at most 6,741 partial wrappings
// of a 32-block model (215,712 block-nodes; 6,507 of 10 blocks, 5,620 of 12); over 80 or 126 blocks (llama3-70b,
// llama3.1-405b) 4 ended holding 7 and the other 30 ran to the 10,000 and gave up, about 10 ms each, the answer
// coming from the tightened floors, the per-cap DPs and the refinements. So a search over n blocks holds at most
// min(kMaxWrapSearchNodes, kMaxWrapSearchBlockNodes / n) partial wrappings: 1,984 over 126 blocks, 3,125 over 80.
// The same budget for a best-first search that runs without the label DP (Note [Bound-only wrap search]), measured
// there.
inline constexpr std::size_t kMaxBoundOnlySearchNodes = 4'000;

struct WrapSearchOptions {
  int max_unit_blocks = 8;
  std::int64_t memory_cap_bytes = 0;
  // The simulator's verdict on a wrapping: its units and, per unit, whether it stays gathered after forward.
  std::function<WrapCheck(const std::vector<LayerRange>&, const std::vector<bool>&)> check;
  // Each unit chooses reshard_after_forward (FSDP2's per-module setting): keeping a unit gathered from forward to
  // backward saves its backward all-gather and costs its parameters' memory over that time.
  bool per_unit_reshard = true;
  std::size_t max_checks = kMaxWrapChecks;  // give up after this many wrappings fail `check`
  std::size_t max_search_nodes = kMaxWrapSearchNodes;  // give up when the best-first tree holds more partial wrappings
  // ... or more than this many divided by the blocks (Note [Block budget]; a search without the DP keeps its own).
  std::size_t max_search_block_nodes = kMaxWrapSearchBlockNodes;
  // Give up (reshard_choice_dropped set) rather than search without the per-unit choice when its labels outgrow
  // their budget: for a search that is only worth running with it (Note [Tightened floor] in searcher_setting.cpp).
  bool give_up_without_choice = false;
  // The floor holds for every prefetch depth (a search whose `check` also tries other depths: Note [Prefetch depth]).
  bool floor_for_any_prefetch_depth = false;
  double stop_above_s = std::numeric_limits<double>::infinity();  // an incumbent: nothing slower is wanted
  // Past this many labels offered to its states (0: no limit), the label DP stops and the best-first search runs
  // alone (Note [Bound-only wrap search]), holding at most bound_only_max_search_nodes partial wrappings.
  std::size_t label_dp_max_labels = 0;
  std::size_t bound_only_max_search_nodes = kMaxBoundOnlySearchNodes;
};

struct WrapSearchResult {
  std::vector<LayerRange> units;  // non-root units, in layer order
  std::vector<bool> kept_gathered;  // per unit: reshard_after_forward = false
  double modelled_step_s = 0;
  double simulated_step_s = 0;  // the simulator's time of the answer
  bool found = false;
  bool exhausted = false;   // no wrapping fits (or none is faster than stop_above_s)
  bool gave_up = false;     // max_checks wrappings failed `check`, or the search outgrew its node budget: fall back
  bool per_unit_reshard = false;        // which last units stay gathered was searched too
  bool reshard_choice_dropped = false;  // it was asked for, but its labels grew too many: partitions only
  bool bound_only = false;  // the label DP went past its budget (Note [Bound-only wrap search])
  std::size_t checked = 0;  // wrappings given to `check`
  std::size_t nodes = 0;    // partial and complete wrappings the best-first tree held when the search ended
  std::size_t pruned_by_memory = 0;
};

WrapSearchResult fastest_fitting_wrapping(WrapFragments& fragments, const WrapSearchOptions& options);

// Note [Bound-only wrap search]: the label DP's wrapping is worth its cost where the model may be exact (it is then
// the answer once the simulator says it fits), and where its dominance proves cheaply that nothing beats the
// incumbent. A search under a timing relaxation (Note [Prefetch depth] in searcher_setting.cpp) has no exact model:
// no checked wrapping ends it, so the best-first search runs to the same end whatever it checks first. There the DP
// is given a budget of labels (WrapSearchOptions::label_dp_max_labels): past it, the DP stops and the best-first
// search runs alone from the least key of the last units — exact for the same reason as with the DP (every key is a
// lower bound of what follows it), and with the per-unit kept choice the DP would have dropped on overflowing. With
// a floor that holds for any prefetch depth, the labels differ in their memory terms and the sets grow large:
// llama3.1-405b over 2048 H100s spent 110-134 ms in each of three such DPs (0.6-0.7 M labels) whose wrappings the
// simulator then refused, and its best-first searches took ~20 ms. A DP that ends within a small budget still pays:
// its dominance proves in a millisecond or two what the tree would expand node by node. The prefetch-depth searches'
// budget (SearchOptions::depth_search_dp_labels), measured on the 2-core reference machine (2026-12-06, `plan
// --jobs 1`, user s; budget 0 = the DP always, 1 = the best-first search alone):
//   command (H100-80GB)          budget 0      1   20,000   150,000
//   llama3.1-405b on 256x8           1.72   1.20     1.19      1.84
//   llama3-70b on 256x8              2.21   1.62     1.44      2.24
//   llama3-70b on 32x8               0.99   1.02     0.67      0.98
//   llama3-8b on 256x8               0.41   0.63     0.41      0.38
// The one-ahead searches keep the DP whole: their model is often exact, and a budget there changed llama3-70b's plan
// on 2048 H100s (8.1098 → 8.1114 s: the tree gave up where the DP would have answered).
// Without the DP's dominance the tree grows nearly level by level, and most such searches never complete a wrapping:
// counted over the unit tests and ten planning commands (2026-12-06: the 405B and 70B plans on 256 and 2048 H100s,
// the demo's plan and capacity sweep, the 7B fixed-batch sweep, ...), of 198 bound-only searches 24 found their
// answer holding at most 1,983 partial wrappings and 14 proved none, at most 1,270; the other 160 ran to the 10,000
// of kMaxWrapSearchNodes with no wrapping checked (llama3-70b on 2048 H100s: 34 of them, 0.40 of its 1.29 CPU s).
// So a bound-only search holds at most kMaxBoundOnlySearchNodes, twice the most any search that ended needed.

// Note [Least peak]: `--objective memory` wants the least simulated peak, then the fastest plan at it. The least
// peak comes from a branch and bound on the memory floor (Note [Wrap floor]): partial wrappings from the right, keyed
// by a floor of every completion, each complete wrapping simulated, until no key is below the least peak found (with
// the last units kept gathered too, when options.per_unit_reshard: keeping a unit gathered adds memory, but the
// simulated peak also depends on timing, and a kept unit's earlier backward can free buffers sooner — measured in
// test_search.cpp). The fastest wrapping at that peak is then fastest_fitting_wrapping with the peak as the cap, so
// the pair is exact for (peak, then time).
struct LeastPeakResult {
  std::vector<LayerRange> units;
  std::int64_t peak_bytes = 0;
  bool found = false;    // false also when no wrapping can be at or below `stop_above_bytes`
  bool gave_up = false;  // max_checks simulations or the node budget ran out
  std::size_t checked = 0;
};
LeastPeakResult least_peak_wrapping(WrapFragments& fragments, const WrapSearchOptions& options,
                                    std::int64_t stop_above_bytes = std::numeric_limits<std::int64_t>::max());

}  // namespace shardplan
