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
};

// With per-unit reshard and a memory floor, labels differ in many ways and a state can hold very many; past this the
// DP stops and the caller searches without the per-unit choice (or falls back to the per-cap DPs).
constexpr std::size_t kMaxLabelsPerState = 128;

// Drops labels another label dominates (Note [Wrap DP]): no more cost, a state at least as free with the same busy
// streams, no more optimizer elements, and — with a floor — no more shards and no more live bytes in any term.
void keep_pareto(std::vector<Label>& labels, bool with_floor);

// The fastest wrapping by the step model (with a cap: among those the memory floor allows), if one is modelled no
// slower than `stop_above_s` (an incumbent: labels that cannot beat it are dropped).
DpAnswer label_dp(WrapContext& context, bool with_floor, double stop_above_s = kInf);

}  // namespace shardplan::wrap_internal
