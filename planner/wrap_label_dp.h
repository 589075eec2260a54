// The label DP shared by the wrap searches (Note [Wrap DP] in wrap_dp.h): Pareto sets of labels per state, from the
// last unit down. Internal to planner/.
#pragma once

#include <vector>

#include "wrap_context.h"

namespace shardplan::wrap_internal {

inline std::vector<LayerRange> to_units(const WrapFragments& fragments, const std::vector<UnitChoice>& choices) {
  std::vector<LayerRange> units;
  for (const auto& choice : choices) {
    units.push_back({fragments.first_layer_of_block(choice.first_block),
                     fragments.first_layer_of_block(choice.first_block) + choice.length});
  }
  return units;
}
inline std::vector<bool> to_kept(const std::vector<UnitChoice>& choices) {
  std::vector<bool> kept;
  for (const auto& choice : choices) kept.push_back(choice.kept);
  return kept;
}

// A wrapping's label from its units (left to right), and its close: what the searches' bounds and tests use.
WrapContext::Closed close_wrapping(WrapContext& context, const std::vector<UnitChoice>& choices,
                                   bool exact_memory = false);

struct DpAnswer {
  std::vector<UnitChoice> choices;
  double modelled_step_s = 0;
  bool exact = false;     // the answer's model is its simulated step
  bool found = false;
  bool overflow = false;  // a state's labels outgrew kMaxLabelsPerState: no answer
  bool over_budget = false;  // more labels than `max_labels` were offered to the states: no answer
};

// With per-unit reshard and a memory floor, labels differ in many ways and a state can hold very many; past this the
// DP stops and the caller searches without the per-unit choice (or falls back to the per-cap DPs).
constexpr std::size_t kMaxLabelsPerState = 128;

// A state's labels may outnumber kMaxLabelsPerState while they arrive (a later label can drop many): past this the
// state counts as overflowing (Note [Pareto on arrival] in wrap_label_dp.cpp).
constexpr std::size_t kMaxMembersWhileAdding = 4 * kMaxLabelsPerState;

// One state's labels as they arrive, kept Pareto (Note [Pareto on arrival]): a label another dominates is dropped
// (Note [Wrap DP]: no more cost, a state at least as free with the same busy streams, no more optimizer elements, and
// — with a floor — no more shards and no more live bytes in any term).
class ParetoSet {
 public:
  explicit ParetoSet(bool with_floor = false) : with_floor_(with_floor) {}
  // Keeps `label` unless a member that precedes it (cost, exact first at equal cost, then arrival) dominates it, and
  // drops the members it precedes and dominates.
  void add(Label&& label);
  // The members in (cost, exact first, arrival) order; once called, `add` is not called again.
  std::vector<Label>& sorted();
  bool empty() const { return members_.empty(); }
  // More than kMaxMembersWhileAdding members at once (Note [Pareto on arrival]): the DP treats it as an overflow.
  bool overflowed() const { return overflowed_; }

 private:
  std::vector<Label> members_;
  std::vector<std::uint64_t> arrival_;  // per member: its place in the order labels were added
  std::uint64_t next_arrival_ = 0;
  std::size_t last_dominator_ = 0;      // the member that dropped the last label: tried first
  bool with_floor_;
  bool sorted_ = false;
  bool overflowed_ = false;
};

// The fastest wrapping by the step model (with a cap: among those the memory floor allows), if one is modelled no
// slower than `stop_above_s` (an incumbent: labels that cannot beat it are dropped). `max_labels` (0: none) bounds
// the labels offered to the states, its work: past it the DP stops (DpAnswer::over_budget).
DpAnswer label_dp(WrapContext& context, bool with_floor, double stop_above_s = kInf, std::size_t max_labels = 0);

}  // namespace shardplan::wrap_internal
