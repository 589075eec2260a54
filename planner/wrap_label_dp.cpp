// The label DP (Note [Wrap DP] in wrap_dp.h): Pareto sets of labels from the last unit down, pruned by the bounds of
// the rest and the memory floor, closed at the first unit.
#include "wrap_label_dp.h"

#include <algorithm>
#include <bit>

#include "errors.h"

namespace shardplan::wrap_internal {

namespace {

inline bool dominates(const Label& better, const Label& label, bool with_floor) {
  // Cheapest tests first: the busy streams and the optimizer's elements, then the busy streams' free times — a
  // stream that is not busy is free at 0 in both (busy_streams) — where three in four tests fail (llama3-70b over
  // 2048 H100s), then the memory terms.
  if (better.busy != label.busy || better.optimizer_elements > label.optimizer_elements) return false;
  for (unsigned busy = better.busy; busy != 0; busy &= busy - 1) {
    const auto stream = static_cast<std::size_t>(std::countr_zero(busy));
    if (better.state.stream_free_s[stream] > label.state.stream_free_s[stream]) return false;
  }
  if (with_floor) {
    if (better.persistent_bytes > label.persistent_bytes) return false;
    for (std::size_t at = 0; at < label.memory.size(); ++at) {
      if (better.memory[at] > label.memory[at]) return false;
    }
  }
  return better.state.comm_busy.empty() || better.state.at_least_as_free_as(label.state);
}

}  // namespace

// Note [Pareto on arrival]: a state's labels are filtered as they arrive instead of all at once when the state is
// expanded. The survivors are the same: keep_pareto's rule — in (cost, exact first, arrival) order, a label survives
// unless a label before it dominates it (dominance is transitive, so "a surviving label before it" is the same) — is
// what `add` keeps, whatever the order labels arrive in: an arriving label is dropped when a member before it in that
// order dominates it, and drops the members after it that it dominates (a member some other member before it
// dominated would have been dropped already, so an arriving label that is dropped drops nothing). Sorting the members
// at the end gives keep_pareto's order, so the search's parents and ties are unchanged. A set is only known to hold
// too many labels (kMaxLabelsPerState) once every label has arrived, and each arrival is tested against every member:
// past kMaxMembersWhileAdding members the set stops and counts as overflowing, which bounds that work (the sets of
// the planner_bench commands peak under 192 members; a set so large rarely shrinks under the budget). What it saves:
// on llama3-70b over 2048 H100s, 8.3 M labels reached the states and 1.0 M survived; each was stored (~300 bytes),
// sorted and moved before being dropped, in buffers large enough to come from mmap and fault their pages in.
void ParetoSet::add(Label&& label) {
  if (overflowed_) return;
  const std::uint64_t arrival = next_arrival_++;
  // `member` comes before `label` in (cost, exact first, arrival) order; `label` arrives last.
  const auto before = [&](const Label& member) {
    return member.cost_s != label.cost_s ? member.cost_s < label.cost_s : member.exact || !label.exact;
  };
  if (last_dominator_ < members_.size()) {
    const Label& likely = members_[last_dominator_];
    if (before(likely) && dominates(likely, label, with_floor_)) return;
  }
  for (std::size_t at = 0; at < members_.size();) {
    const Label& member = members_[at];
    if (before(member)) {
      if (at != last_dominator_ && dominates(member, label, with_floor_)) {
        last_dominator_ = at;
        return;  // dropped; it dropped no member (Note [Pareto on arrival])
      }
    } else if (dominates(label, member, with_floor_)) {
      members_[at] = std::move(members_.back());
      arrival_[at] = arrival_.back();
      members_.pop_back();
      arrival_.pop_back();
      continue;  // the member moved here is tested next
    }
    ++at;
  }
  members_.push_back(std::move(label));
  arrival_.push_back(arrival);
  if (members_.size() > kMaxMembersWhileAdding) {
    overflowed_ = true;
    members_.clear();
    arrival_.clear();
  }
}

std::vector<Label>& ParetoSet::sorted() {
  if (!sorted_ && members_.size() > 1) {
    std::vector<std::size_t> order(members_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const Label &first = members_[a], &second = members_[b];
      if (first.cost_s != second.cost_s) return first.cost_s < second.cost_s;
      if (first.exact != second.exact) return first.exact;
      return arrival_[a] < arrival_[b];
    });
    if (!std::is_sorted(order.begin(), order.end())) {
      std::vector<Label> in_order;
      in_order.reserve(members_.size());
      for (std::size_t i : order) in_order.push_back(std::move(members_[i]));
      members_ = std::move(in_order);
    }
  }
  sorted_ = true;
  arrival_.clear();
  return members_;
}

WrapContext::Closed close_wrapping(WrapContext& context, const std::vector<UnitChoice>& choices, bool exact_memory) {
  SHARDPLAN_CHECK(!choices.empty() && choices.back().first_block + choices.back().length == context.n,
                  "a wrapping covers every block");
  WrapFragments& fragments = context.fragments;
  const auto held_by = [&](std::size_t unit) -> std::int64_t {
    return unit + 1 < choices.size() ? fragments.held_by_reduction_above(choices[unit], choices[unit + 1]) : 0;
  };
  Label label = context.last_unit(choices.back());
  for (std::size_t k = choices.size() - 1; k > 0; --k) {
    label = context.extend(label, choices[k], choices[k - 1], exact_memory ? held_by(k) : 0, exact_memory);
  }
  return context.close(label, choices.front(), exact_memory ? held_by(0) : 0, exact_memory);
}

DpAnswer label_dp(WrapContext& context, bool with_floor, double stop_above_s, std::size_t max_labels) {
  const std::size_t n = context.n, m = context.m;
  const std::span<const bool> kept_options = context.kept_options();
  // An upper bound of the optimum: every uniform wrapping (k blocks per unit, as the template keeps) the floor allows.
  double upper_bound = stop_above_s;
  for (std::size_t k = 1; k <= m; ++k) {
    std::vector<UnitChoice> choices;
    bool allowed = true;
    for (std::size_t first = 0; first < n; first += k) {
      choices.push_back({first, std::min(k, n - first), context.template_kept});
      allowed = allowed && context.fragments.may_share_unit(first, choices.back().length);
    }
    if (!allowed) continue;  // Note [Uniform requires_grad] (plan.h)
    const WrapContext::Closed closed = close_wrapping(context, choices);
    if (!with_floor || context.memory_cap_bytes <= 0 || closed.floor_bytes <= context.memory_cap_bytes) {
      upper_bound = std::min(upper_bound, closed.step_s);
    }
  }
  const double prune_above = upper_bound * (1.0 + 1e-9);  // keep the optimum through rounding
  const auto promising = [&](const Label& label, const UnitChoice& unit) {
    return label.cost_s + context.lower_bound(unit, label) <= prune_above &&
           (!with_floor || context.fits_floor(unit, label));
  };
  std::vector<ParetoSet> labels((n + 1) * (m + 1) * 2, ParetoSet(with_floor));
  for (std::size_t b = 1; b <= m; ++b) {
    for (bool kept : kept_options) {
      const UnitChoice unit{n - b, b, kept};
      if (!context.fragments.may_share_unit(unit.first_block, unit.length)) continue;
      Label label = context.last_unit(unit);
      if (promising(label, unit)) labels[context.state_index(unit)].add(std::move(label));
    }
  }
  DpAnswer overflow, over_budget;
  overflow.overflow = true;
  over_budget.over_budget = true;
  std::size_t offered = 0;  // labels offered to the states: the DP's work (max_labels)
  // Right to left: a state's labels are final once every state with a larger first block has been expanded.
  for (std::size_t p = n; p-- > 1;) {
    for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
      for (bool kept : kept_options) {
        const UnitChoice unit{p, b, kept};
        const std::size_t state = context.state_index(unit);
        if (labels[state].overflowed()) return overflow;
        if (labels[state].empty()) continue;
        const std::vector<Label>& here = labels[state].sorted();
        if (here.size() > kMaxLabelsPerState) return overflow;
        context.for_each_left_neighbour(unit, [&](const UnitChoice& left) {
          auto& target = labels[context.state_index(left)];
          const WrapContext::Transition step = context.transition(unit, left);
          for (std::size_t index = 0; index < here.size(); ++index) {
            Label next = context.extend(here[index], step, 0, false);
            next.parent_state = state;
            next.parent_label = index;
            if (promising(next, left)) {
              target.add(std::move(next));
              ++offered;
            }
          }
        });
        if (max_labels > 0 && offered > max_labels) return over_budget;
      }
    }
  }
  // Close at the first unit: the head, its backward with the embedding's, the root's reduction, the optimizer.
  DpAnswer answer;
  double best_total = kInf;
  bool best_exact = false;
  std::size_t best_state = kNone, best_label = kNone;
  for (std::size_t b = 1; b <= m; ++b) {
    for (bool kept : kept_options) {
      const UnitChoice unit{0, b, kept};
      const std::size_t state = context.state_index(unit);
      if (labels[state].overflowed()) return overflow;
      const std::vector<Label>& here = labels[state].sorted();
      if (here.size() > kMaxLabelsPerState) return overflow;
      for (std::size_t index = 0; index < here.size(); ++index) {
        const WrapContext::Closed closed = context.close(here[index], unit);
        if (with_floor && context.memory_cap_bytes > 0 && closed.floor_bytes > context.memory_cap_bytes) continue;
        if (closed.step_s < best_total || (closed.step_s == best_total && closed.exact && !best_exact)) {
          best_total = closed.step_s;
          best_exact = closed.exact;
          best_state = state;
          best_label = index;
        }
      }
    }
  }
  if (best_state == kNone) return answer;
  // Walk the parents: from the first unit rightwards.
  for (std::size_t state = best_state, index = best_label; state != kNone;) {
    answer.choices.push_back(context.unit_of(state));
    const Label& label = labels[state].sorted()[index];
    state = label.parent_state;
    index = label.parent_label;
  }
  answer.found = true;
  answer.modelled_step_s = best_total;
  answer.exact = best_exact;
  return answer;
}

}  // namespace shardplan::wrap_internal
