// The least simulated peak over wrappings (Note [Least peak] in wrap_dp.h): branch and bound on the memory floor.
#include <queue>

#include "wrap_dp.h"
#include "wrap_label_dp.h"

namespace shardplan {

using namespace wrap_internal;

LeastPeakResult least_peak_wrapping(WrapFragments& fragments, const WrapSearchOptions& options,
                                    std::int64_t stop_above_bytes) {
  WrapContext context(fragments, options.max_unit_blocks, 0, options.per_unit_reshard,
                      options.floor_for_any_prefetch_depth);
  struct Node {
    Label label;
    UnitChoice leftmost;
    std::size_t parent;
    bool complete;
  };
  std::vector<Node> nodes;
  using Entry = std::pair<std::int64_t, std::size_t>;  // (floor, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  LeastPeakResult result;
  const auto push = [&](Node node, std::int64_t key) {
    if (key > stop_above_bytes || (result.found && key >= result.peak_bytes)) return;
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
      Node node{context.last_unit(last), last, kNone, false};
      const std::int64_t key = context.floor_bytes(last, node.label);
      push(std::move(node), key);
    }
  }
  while (!queue.empty()) {
    if (nodes.size() > options.max_search_nodes) {
      result.gave_up = true;
      return result;
    }
    const auto [key, index] = queue.top();
    if (result.found && key >= result.peak_bytes) break;  // nothing left can be lower
    queue.pop();
    if (nodes[index].complete) {
      std::vector<UnitChoice> choices;
      for (std::size_t at = index; at != kNone; at = nodes[at].parent) choices.push_back(nodes[at].leftmost);
      ++result.checked;
      const WrapCheck verdict = options.check(to_units(fragments, choices), to_kept(choices));
      if (!result.found || verdict.peak_bytes < result.peak_bytes) {
        result.found = true;
        result.peak_bytes = verdict.peak_bytes;
        result.units = to_units(fragments, choices);
      }
      if (result.checked >= options.max_checks && !queue.empty() && queue.top().first < result.peak_bytes) {
        result.gave_up = true;
        return result;
      }
      continue;
    }
    const UnitChoice unit = nodes[index].leftmost;
    const std::size_t above = nodes[index].parent;
    if (unit.first_block == 0) {
      // Close: the node becomes the complete wrapping (it stands for the first unit, so its parent stays).
      const WrapContext::Closed closed =
          context.close(nodes[index].label, unit, held_above(unit, above), /*exact_memory=*/true);
      push(Node{nodes[index].label, unit, above, true}, closed.floor_bytes);
      continue;
    }
    context.for_each_left_neighbour(unit, [&](const UnitChoice& left) {
      Label label = context.extend(nodes[index].label, unit, left, held_above(unit, above), /*exact_memory=*/true);
      const std::int64_t next_key = context.floor_bytes(left, label);
      push(Node{std::move(label), left, index, false}, next_key);
    });
  }
  return result;
}

}  // namespace shardplan
