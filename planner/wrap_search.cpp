// The fastest fitting wrapping (Note [Wrap search] in wrap_dp.h): the floor-filtered label DP, then wrappings in
// time order, best first, checked by the simulator until one fits (where the model is a lower bound: until none left
// can beat the fastest that fits).
#include <algorithm>
#include <optional>
#include <queue>

#include "wrap_dp.h"
#include "wrap_label_dp.h"

namespace shardplan {

using namespace wrap_internal;

namespace {

// A best-first node: a partial wrapping from the right (its leftmost unit and the label), or a complete one.
struct Node {
  Label label;
  UnitChoice leftmost;
  std::size_t parent = kNone;  // the node of the unit right above
  bool complete = false;
  bool exact = false;          // complete: its modelled time is its simulated one
};

// The wrapping a node stands for: its units from the leftmost placed one rightwards, through the parents.
std::vector<UnitChoice> wrapping_of(const std::vector<Node>& nodes, std::size_t index) {
  std::vector<UnitChoice> choices;
  for (std::size_t at = index; at != kNone; at = nodes[at].parent) choices.push_back(nodes[at].leftmost);
  return choices;
}

}  // namespace

WrapSearchResult fastest_fitting_wrapping(WrapFragments& fragments, const WrapSearchOptions& options) {
  WrapContext with_choice(fragments, options.max_unit_blocks, options.memory_cap_bytes, options.per_unit_reshard,
                          options.floor_for_any_prefetch_depth);
  WrapSearchResult result;
  // Nothing to do when no wrapping's lower bound beats the incumbent (the bounds alone cost far less than the DP).
  double least_s = kInf;
  for (std::size_t b = 1; b <= with_choice.m; ++b) {
    for (bool kept : with_choice.kept_options()) {
      const UnitChoice last{with_choice.n - b, b, kept};
      if (!fragments.may_share_unit(last.first_block, last.length)) continue;
      least_s = std::min(least_s, with_choice.last_unit(last).cost_s + with_choice.lower_bound(last, {}));
    }
  }
  if (least_s > options.stop_above_s) {
    result.exhausted = true;
    return result;
  }
  DpAnswer floor_best = label_dp(with_choice, true, options.stop_above_s, options.label_dp_max_labels);
  // Note [Bound-only wrap search]: past its budget, the best-first search alone, from the least key.
  const bool bound_only = result.bound_only = floor_best.over_budget;
  if (bound_only) {
    floor_best = {};
    floor_best.found = true;
    floor_best.modelled_step_s = least_s;
  }
  std::optional<WrapContext> without_choice;
  if (floor_best.overflow && options.give_up_without_choice) {
    result.gave_up = result.reshard_choice_dropped = true;
    return result;
  }
  if (floor_best.overflow) {
    without_choice.emplace(fragments, options.max_unit_blocks, options.memory_cap_bytes, false,
                           options.floor_for_any_prefetch_depth);
    floor_best = label_dp(*without_choice, true, options.stop_above_s);
  }
  WrapContext& context = without_choice ? *without_choice : with_choice;
  result.per_unit_reshard = context.keep_choice;
  result.reshard_choice_dropped = with_choice.keep_choice && !context.keep_choice;
  // The fastest simulated wrapping that fits so far. With an exact model the first one is the answer; with a lower
  // bound it is the answer once no key left is below its time (Note [Wrap search]).
  struct Incumbent {
    std::vector<UnitChoice> choices;
    double modelled_s = 0, simulated_s = kInf;
    bool found = false;
  } best;
  const auto answer = [&](const Incumbent& incumbent) {
    result.found = true;
    result.units = to_units(fragments, incumbent.choices);
    result.kept_gathered = to_kept(incumbent.choices);
    result.modelled_step_s = incumbent.modelled_s;
    result.simulated_step_s = incumbent.simulated_s;
    return result;
  };
  // Simulates a wrapping; true when the search is over (an exact model's wrapping that fits).
  const auto check = [&](const std::vector<UnitChoice>& choices, double modelled_s, bool exact) {
    ++result.checked;
    const WrapCheck verdict = options.check(to_units(fragments, choices), to_kept(choices));
    if (verdict.fits && verdict.step_s < best.simulated_s) best = {choices, modelled_s, verdict.step_s, true};
    return verdict.fits && exact;
  };
  // Nothing keyed at or above this can be the answer: the incumbent, or one from outside (stop_above_s).
  const auto beaten = [&](double key) { return key > options.stop_above_s || (best.found && key >= best.simulated_s); };
  if (floor_best.overflow) {  // even without the kept choice: the caller falls back
    result.gave_up = true;
    return result;
  }
  if (!floor_best.found || floor_best.modelled_step_s > options.stop_above_s) {
    result.exhausted = true;
    return result;
  }
  // First the fastest wrapping the floor allows: when the simulator agrees it fits, nothing faster can (every
  // faster wrapping's floor is over the cap), so with an exact model it is the answer.
  if (!bound_only && check(floor_best.choices, floor_best.modelled_step_s, floor_best.exact)) return answer(best);
  // Otherwise wrappings in nondecreasing time, best first over partial wrappings from the right (keyed by cost + the
  // bound of the rest; complete ones by their time), each checked until one fits.
  std::vector<Node> nodes;
  using Entry = std::pair<double, std::size_t>;  // (key, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  const auto push = [&](Node node, double key, bool fits_floor) {
    if (beaten(key)) return;  // cannot beat the incumbent
    if (!fits_floor) {
      ++result.pruned_by_memory;
      return;
    }
    nodes.push_back(std::move(node));
    queue.push({key, nodes.size() - 1});
  };
  const auto held_above = [&](const UnitChoice& unit, std::size_t above) -> std::int64_t {
    return above == kNone ? 0 : fragments.held_by_reduction_above(unit, nodes[above].leftmost);
  };
  for (std::size_t b = 1; b <= context.m; ++b) {
    for (bool kept : context.kept_options()) {
      const UnitChoice last{context.n - b, b, kept};
      if (!fragments.may_share_unit(last.first_block, last.length)) continue;
      Node node{context.last_unit(last), last, kNone, false, false};
      const double key = node.label.cost_s + context.lower_bound(last, node.label);
      const bool fits = context.fits_floor(last, node.label);
      push(std::move(node), key, fits);
    }
  }
  // Note [Block budget] (wrap_dp.h).
  const std::size_t block_nodes = options.max_search_block_nodes / std::max<std::size_t>(1, context.n);
  const std::size_t max_nodes = bound_only ? std::min(options.max_search_nodes, options.bound_only_max_search_nodes)
                                           : std::min(options.max_search_nodes, block_nodes);
  while (!queue.empty()) {
    result.nodes = nodes.size();
    if (nodes.size() > max_nodes) {
      result.gave_up = true;
      return result;
    }
    const std::size_t index = queue.top().second;
    if (beaten(queue.top().first)) break;  // nothing left is faster than the incumbent
    const double key = queue.top().first;
    queue.pop();
    if (nodes[index].complete) {
      const std::vector<UnitChoice> choices = wrapping_of(nodes, index);
      if (choices == floor_best.choices) continue;  // checked above
      if (check(choices, key, nodes[index].exact)) return answer(best);
      if (result.checked >= options.max_checks) {
        result.gave_up = true;
        return result;
      }
      continue;
    }
    const UnitChoice unit = nodes[index].leftmost;
    const std::size_t above = nodes[index].parent;
    if (unit.first_block == 0) {
      // Close: the node becomes a complete wrapping with its time; it stands for the first unit itself, so its
      // parent is the node's parent.
      const WrapContext::Closed closed =
          context.close(nodes[index].label, unit, held_above(unit, above), /*exact_memory=*/true);
      Node done{nodes[index].label, unit, above, true, closed.exact};
      const bool fits = context.memory_cap_bytes <= 0 || closed.floor_bytes <= context.memory_cap_bytes;
      push(std::move(done), closed.step_s, fits);
      continue;
    }
    context.for_each_left_neighbour(unit, [&](const UnitChoice& left) {
      Label label = context.extend(nodes[index].label, unit, left, held_above(unit, above), /*exact_memory=*/true);
      const double next_key = label.cost_s + context.lower_bound(left, label);
      const bool fits = context.fits_floor(left, label);
      push(Node{std::move(label), left, index, false, false}, next_key, fits);
    });
  }
  if (best.found) return answer(best);  // the lower-bound model's answer: nothing left beats it
  result.exhausted = true;  // no other wrapping fits, or none can beat stop_above_s
  return result;
}

}  // namespace shardplan
