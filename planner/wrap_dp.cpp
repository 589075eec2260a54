// The wrap DP's public face (Note [Wrap DP] in wrap_dp.h): the fastest wrapping by the fragments' step time.
#include "wrap_dp.h"

#include <algorithm>

#include "wrap_label_dp.h"

namespace shardplan {

using namespace wrap_internal;

WrapDpResult best_wrapping(WrapFragments& fragments, const WrapDpOptions& options) {
  WrapContext context(fragments, options.max_unit_blocks, 0, false);
  const DpAnswer answer = label_dp(context, false);
  WrapDpResult result;
  result.found = answer.found;
  result.units = to_units(fragments, answer.choices);
  result.modelled_step_s = answer.modelled_step_s;
  result.exact = answer.exact;
  return result;
}

WrapEvaluation evaluate_wrapping(WrapFragments& fragments, const std::vector<UnitChoice>& units, bool exact_memory,
                                 bool floor_for_any_prefetch_depth) {
  std::size_t longest = 1;
  for (const UnitChoice& unit : units) longest = std::max(longest, unit.length);
  WrapContext context(fragments, static_cast<int>(longest), 0, true, floor_for_any_prefetch_depth);
  const WrapContext::Closed closed = close_wrapping(context, units, exact_memory);
  return {closed.step_s, closed.exact, closed.floor_bytes};
}

}  // namespace shardplan
