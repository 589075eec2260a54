// The least simulated peak over wrappings (Note [Least peak] in wrap_dp.h): branch and bound on the memory floor.
#include <queue>

#include "wrap_dp.h"
#include "wrap_label_dp.h"

namespace shardplan {

using namespace wrap_internal;

LeastPeakResult least_peak_wrapping(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                                    int world_size, int gpus_per_node, const WrapSearchOptions& options,
                                    std::int64_t stop_above_bytes) {
  // No cap: the floor's slack is measured from a large constant budget B, so a floor is B − slack above the rest.
  WrapContext context(model, plan_template, profile, world_size, gpus_per_node, options.max_unit_blocks, 0,
                      options.per_unit_reshard);
  const std::size_t n = context.n, m = context.m;
  const std::vector<bool> kept_options = context.kept_options();
  struct Node {
    std::int64_t placed_persistent;  // the placed units' shards
    std::int64_t slack;              // Note [Wrap search]
    UnitChoice leftmost;
    std::size_t parent;
    bool complete;
  };
  std::vector<Node> nodes;
  // A floor of the simulated peak of every completion of `node`.
  const auto floor_of = [&](const Node& node) {
    return context.floor.constant_bytes() + node.placed_persistent +
           context.least_persistent[node.leftmost.first_block] + (context.budget_bytes - node.slack);
  };
  using Entry = std::pair<std::int64_t, std::size_t>;  // (floor, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  LeastPeakResult result;
  const auto push = [&](const Node& node) {
    const std::int64_t key = floor_of(node);
    if (key > stop_above_bytes || (result.found && key >= result.peak_bytes)) return;
    nodes.push_back(node);
    queue.push({key, nodes.size() - 1});
  };
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    for (bool kept : kept_options) {
      push({context.floor.sizes(n - b, b).persistent, context.last_unit_slack(b, kept), {n - b, b, kept}, kNone,
            false});
    }
  }
  constexpr std::size_t kMaxNodes = 20'000;  // without dominance the tree can grow exponentially
  while (!queue.empty()) {
    if (nodes.size() > kMaxNodes) {
      result.gave_up = true;
      return result;
    }
    const auto [key, index] = queue.top();
    if (result.found && key >= result.peak_bytes) break;  // nothing left can be lower
    queue.pop();
    const Node node = nodes[index];
    // The reduce-scatter input the unit right above still holds (Note [Reduction buffers]).
    const std::int64_t held_above = node.parent == kNone ? 0 : context.held_by(nodes[node.parent].leftmost);
    if (node.complete) {
      const std::vector<UnitChoice> choices = wrapping_of(nodes, index);
      ++result.checked;
      const WrapCheck verdict = options.check(to_units(context.terms, choices), to_kept(choices));
      if (!result.found || verdict.peak_bytes < result.peak_bytes) {
        result.found = true;
        result.peak_bytes = verdict.peak_bytes;
        result.units = to_units(context.terms, choices);
      }
      if (result.checked >= options.max_checks && !queue.empty() && queue.top().first < result.peak_bytes) {
        result.gave_up = true;
        return result;
      }
      continue;
    }
    const UnitChoice unit = node.leftmost;
    if (unit.first_block == 0) {
      // Close: the node becomes the complete wrapping (it stands for the first unit, so its parent stays).
      Node done = node;
      done.slack = context.close_slack(node.slack, unit.length, held_above);
      done.complete = true;
      push(done);
      continue;
    }
    context.for_each_left_neighbour(unit, [&](const UnitChoice& left) {
      push({node.placed_persistent + context.floor.sizes(left.first_block, left.length).persistent,
            context.extend_slack(node.slack, unit.first_block, unit.length, left.length, left.kept, held_above), left,
            index, false});
    });
  }
  return result;
}

}  // namespace shardplan
