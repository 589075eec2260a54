// The fastest fitting wrapping (Note [Wrap search] in wrap_dp.h): the floor-filtered label DP, then wrappings in
// time order, best first, checked by the simulator until one fits (with a lower-bound model: until none left can
// beat the fastest that fits).
#include <optional>
#include <queue>

#include "wrap_dp.h"
#include "wrap_label_dp.h"

namespace shardplan {

using namespace wrap_internal;

WrapSearchResult fastest_fitting_wrapping(const ModelSpec& model, const Plan& plan_template,
                                          const HardwareProfile& profile, int world_size, int gpus_per_node,
                                          const WrapSearchOptions& options) {
  WrapContext with_choice(model, plan_template, profile, world_size, gpus_per_node, options.max_unit_blocks,
                          options.memory_cap_bytes, options.per_unit_reshard);
  with_choice.neighbours_gathered = options.floor_holds_neighbours;
  WrapSearchResult result;
  // Nothing to do when no wrapping's lower bound beats the incumbent (the bounds alone cost far less than the DP).
  double least_s = kInf;
  for (std::size_t b = 1; b <= std::min(with_choice.m, with_choice.n); ++b) {
    for (bool kept : with_choice.kept_options()) {
      least_s = std::min(least_s, with_choice.last_unit_cost(b, kept) +
                                      with_choice.bounds.lower_bound(with_choice.n - b, b, 0.0));
    }
  }
  if (least_s > options.stop_above_s) {
    result.exhausted = true;
    return result;
  }
  DpAnswer floor_best = label_dp(with_choice, true);
  std::optional<WrapContext> without_choice;
  if (floor_best.overflow) {
    without_choice.emplace(model, plan_template, profile, world_size, gpus_per_node, options.max_unit_blocks,
                           options.memory_cap_bytes, false);
    without_choice->neighbours_gathered = options.floor_holds_neighbours;
    floor_best = label_dp(*without_choice, true);
  }
  WrapContext& context = without_choice ? *without_choice : with_choice;
  result.per_unit_reshard = context.keep_choice;
  result.reshard_choice_dropped = with_choice.keep_choice && !context.keep_choice;
  // The fastest simulated wrapping that fits so far. With an exact model the first one is the answer; with a lower
  // bound it is the answer once no key left is below its time (Note [Wrap search], WrapCheck).
  struct Incumbent {
    std::vector<UnitChoice> choices;
    double modelled_s = 0, simulated_s = kInf;
    bool found = false;
  } best;
  const auto answer = [&](const Incumbent& incumbent) {
    result.found = true;
    result.units = to_units(context.terms, incumbent.choices);
    result.kept_gathered = to_kept(incumbent.choices);
    result.modelled_step_s = incumbent.modelled_s;
    result.simulated_step_s = incumbent.simulated_s;
    return result;
  };
  // Simulates a wrapping; true when the search is over (the exact model's first fitting wrapping).
  const auto check = [&](const std::vector<UnitChoice>& choices, double modelled_s) {
    ++result.checked;
    const WrapCheck verdict = options.check(to_units(context.terms, choices), to_kept(choices));
    if (verdict.fits && verdict.step_s < best.simulated_s) best = {choices, modelled_s, verdict.step_s, true};
    return verdict.fits && options.model_is_exact;
  };
  // Nothing keyed at or above this can be the answer: the incumbent, or one from outside (stop_above_s).
  const auto beaten = [&](double key) { return key > options.stop_above_s || (best.found && key >= best.simulated_s); };
  // First the fastest wrapping the floor allows: when the simulator agrees it fits, nothing faster can (every
  // faster wrapping's floor is over the cap), so with an exact model it is the answer.
  if (floor_best.overflow) {  // even without the kept choice: the caller falls back
    result.gave_up = true;
    return result;
  }
  if (!floor_best.found || floor_best.modelled_step_s > options.stop_above_s) {
    result.exhausted = true;
    return result;
  }
  if (check(floor_best.choices, floor_best.modelled_step_s)) return answer(best);
  // Otherwise wrappings in nondecreasing time, best first over partial wrappings from the right (keyed by cost + the
  // DP's lower bound of the rest; complete ones by their exact time), each checked until one fits. Bounded: without
  // dominance this search can grow exponentially, so past kMaxNodes it gives up and the caller falls back.
  constexpr std::size_t kMaxNodes = 20'000;
  struct Node {
    double cost_s;
    double backlog_s;
    std::int64_t slack;
    UnitChoice leftmost;
    std::size_t parent;
    bool complete;
    double replica_backlog_s = 0;  // HSDP (Note [Wrap DP])
  };
  std::vector<Node> nodes;
  using Entry = std::pair<double, std::size_t>;  // (key, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  const auto push = [&](const Node& node, double key) {
    if (beaten(key)) return;  // cannot beat the incumbent
    if (node.slack < 0) {
      ++result.pruned_by_memory;
      return;
    }
    nodes.push_back(node);
    queue.push({key, nodes.size() - 1});
  };
  const std::size_t n = context.n, m = context.m;
  const std::vector<bool> kept_options = context.kept_options();
  // Reductions still queued when a unit's backward ops end keep their inputs through all of them (Note [Reduction
  // buffers] in schedule.h): counted from the end of unit k's wait, the unit k + 1's reduce-scatter, last in the
  // queue, starts D − R(k+1) later; while that is after unit k's ops end (`ops_end_s`, from the same point), the input
  // of k + 2 is alive, and so on up the chain (each queued reduce-scatter starts when the one before it ends).
  // `above` is the node of unit k + 1.
  const auto queued_input_bytes = [&](std::size_t above, double backlog_s, double ops_end_s) {
    std::int64_t bytes = 0;
    double start_after_ops_s = backlog_s - ops_end_s;
    for (std::size_t at = above; at != kNone && nodes[at].parent != kNone; at = nodes[at].parent) {
      const UnitChoice& reduced = nodes[at].leftmost;
      start_after_ops_s -= context.terms.unit(reduced.first_block, reduced.length).reduce_s;
      if (!(start_after_ops_s > 0)) break;
      const UnitChoice& held = nodes[nodes[at].parent].leftmost;
      bytes += context.floor.sizes(held.first_block, held.length).held_grad;
    }
    return bytes;
  };
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    for (bool kept : kept_options) {
      const double cost = context.last_unit_cost(b, kept);
      push({cost, 0.0, context.last_unit_slack(b, kept), {n - b, b, kept}, kNone, false},
           cost + context.bounds.lower_bound(n - b, b, 0.0));
    }
  }
  while (!queue.empty()) {
    if (nodes.size() > kMaxNodes) {
      result.gave_up = true;
      return result;
    }
    const std::size_t index = queue.top().second;
    if (beaten(queue.top().first)) break;  // nothing left is faster than the incumbent
    queue.pop();
    const Node node = nodes[index];
    if (node.complete) {
      const std::vector<UnitChoice> choices = wrapping_of(nodes, index);
      if (std::equal(choices.begin(), choices.end(), floor_best.choices.begin(), floor_best.choices.end(),
                     [](const UnitChoice& a, const UnitChoice& b) {
                       return a.first_block == b.first_block && a.length == b.length && a.kept == b.kept;
                     })) {
        continue;  // checked above
      }
      if (check(choices, node.cost_s)) return answer(best);
      if (result.checked >= options.max_checks) {
        result.gave_up = true;
        return result;
      }
      continue;
    }
    const UnitChoice unit = node.leftmost;
    if (unit.first_block == 0) {
      // Close: the node becomes a complete wrapping with its exact time; it stands for the first unit itself, so
      // its parent is the node's parent.
      Node done = node;
      done.cost_s = node.cost_s + context.close_cost(unit.length, node.backlog_s, node.replica_backlog_s);
      const std::int64_t held_above = node.parent == kNone ? 0 : context.held_by(nodes[node.parent].leftmost);
      done.slack = context.close_slack(node.slack, unit.length, held_above);
      done.complete = true;
      push(done, done.cost_s);
      continue;
    }
    context.for_each_left_neighbour(unit, [&](const UnitChoice& left) {
      const auto step = context.extend(unit.first_block, unit.length, left.length, left.kept, node.backlog_s,
                                       node.replica_backlog_s);
      const std::int64_t held_above =
          node.parent == kNone ? 0
                               : context.held_by(nodes[node.parent].leftmost) +
                                     queued_input_bytes(node.parent, node.backlog_s, step.unit_ops_end_s);
      const std::int64_t slack =
          context.extend_slack(node.slack, unit.first_block, unit.length, left.length, left.kept, held_above);
      const Node next{node.cost_s + step.added_s, step.backlog_s, slack, left, index, false, step.replica_backlog_s};
      push(next, next.cost_s + context.bounds.lower_bound(left.first_block, left.length, step.backlog_s));
    });
  }
  if (best.found) return answer(best);  // the lower-bound model's answer: nothing left beats it
  result.exhausted = true;  // no other wrapping fits, or none can beat stop_above_s
  return result;
}

}  // namespace shardplan
