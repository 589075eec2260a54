// The label DP (Note [Wrap DP] in wrap_dp.h): Pareto sets of (cost, backlog, slack) from the last unit down.
#include "wrap_label_dp.h"

#include <algorithm>
#include <iterator>
#include <map>

namespace shardplan::wrap_internal {

void keep_pareto(std::vector<Label>& labels, bool backlog_monotone, bool with_slack) {
  std::sort(labels.begin(), labels.end(), [](const Label& a, const Label& b) {
    return a.cost_s != b.cost_s ? a.cost_s < b.cost_s : a.backlog_s < b.backlog_s;
  });
  std::vector<Label> kept;
  const bool replicas = std::any_of(labels.begin(), labels.end(), [](const Label& label) {
    return label.replica_backlog_s > 0;
  });
  if (replicas) {
    // HSDP's fourth dimension: pairwise, so it stops once the survivors outgrow kMaxLabelsPerState (the caller
    // then gives up on this state's labels).
    for (const Label& label : labels) {
      if (kept.size() > kMaxLabelsPerState) break;
      const bool dominated = std::any_of(kept.begin(), kept.end(), [&](const Label& better) {
        return (backlog_monotone ? better.backlog_s <= label.backlog_s : better.backlog_s == label.backlog_s) &&
               better.replica_backlog_s <= label.replica_backlog_s && (!with_slack || better.slack >= label.slack);
      });
      if (!dominated) kept.push_back(label);
    }
  } else if (backlog_monotone && !with_slack) {
    // In cost order, a label survives when its backlog is below every cheaper survivor's.
    for (const Label& label : labels) {
      if (kept.empty() || label.backlog_s < kept.back().backlog_s) kept.push_back(label);
    }
  } else if (backlog_monotone) {
    // In cost order, a label survives unless a cheaper survivor has no more backlog and no less slack. The
    // survivors' (backlog, slack) staircase: by backlog ascending, slack strictly ascending, so the best slack at
    // backlog ≤ x is the last step at or before x.
    std::map<double, std::int64_t> staircase;
    for (const Label& label : labels) {
      auto after = staircase.upper_bound(label.backlog_s);
      if (after != staircase.begin() && std::prev(after)->second >= label.slack) continue;  // dominated
      kept.push_back(label);
      // Steps at or after this backlog with no more slack are now dominated by it.
      auto at = staircase.lower_bound(label.backlog_s);
      while (at != staircase.end() && at->second <= label.slack) at = staircase.erase(at);
      staircase[label.backlog_s] = label.slack;
    }
  } else {
    for (const Label& label : labels) {
      const bool dominated = std::any_of(kept.begin(), kept.end(), [&](const Label& better) {
        return better.backlog_s == label.backlog_s && (!with_slack || better.slack >= label.slack);
      });
      if (!dominated) kept.push_back(label);
    }
  }
  labels = std::move(kept);
}

DpAnswer label_dp(WrapContext& context, bool with_floor) {
  auto& terms = context.terms;
  const std::size_t n = context.n, m = context.m;
  const bool backlog_monotone = terms.slowdown() <= 2.0;
  const std::vector<bool> kept_options = context.kept_options();
  // An upper bound of the optimum: every uniform wrapping (k blocks per unit, as the template reshards) the floor
  // allows, and without a floor the bounds' own wrapping.
  double upper_bound = with_floor ? kInf : context.bounds.upper_bound();
  for (std::size_t k = 1; k <= m; ++k) {
    std::vector<UnitChoice> choices;
    for (std::size_t first = 0; first < n; first += k) choices.push_back({first, std::min(k, n - first), context.template_kept});
    if (!with_floor || context.wrapping_slack(choices) >= 0) {
      upper_bound = std::min(upper_bound, context.exact(to_units(terms, choices), to_kept(choices)));
    }
  }
  const double prune_above = upper_bound * (1.0 + 1e-9);  // keep the optimum through rounding
  const auto promising = [&](double cost_s, std::size_t p, std::size_t b, double backlog_s, std::int64_t slack) {
    return cost_s + context.bounds.lower_bound(p, b, backlog_s) <= prune_above && (!with_floor || slack >= 0);
  };
  std::vector<std::vector<Label>> labels((n + 1) * (m + 1) * 2);
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    for (bool kept : kept_options) {
      const double cost = context.last_unit_cost(b, kept);
      const std::int64_t slack = context.last_unit_slack(b, kept);
      if (promising(cost, n - b, b, 0.0, slack)) labels[context.state(n - b, b, kept)].push_back({cost, 0.0, slack, kNone, kNone});
    }
  }
  // Right to left: a state's labels are final once every state with a larger p has been expanded.
  for (std::size_t p = n; p-- > 1;) {
    for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
      for (bool kept : kept_options) {
        const std::size_t state = context.state(p, b, kept);
        auto& here = labels[state];
        if (here.empty()) continue;
        keep_pareto(here, backlog_monotone, with_floor);
        if (here.size() > kMaxLabelsPerState) {
          DpAnswer overflow;
          overflow.overflow = true;
          return overflow;
        }
        for (std::size_t c = 1; c <= m && c <= p; ++c) {
          const double left_forward = context.left_forward_s(p, b, c);
          for (bool left_kept : kept_options) {
            if (!context.may_follow(kept, left_kept)) continue;
            auto& target = labels[context.state(p - c, c, left_kept)];
            for (std::size_t index = 0; index < here.size(); ++index) {
              // The unit at p now has its neighbour below: its backward step is final, and so is the left unit's
              // forward step (its right neighbour is known).
              const auto step = context.extend(p, b, c, left_kept, here[index].backlog_s,
                                               here[index].replica_backlog_s, left_forward);
              const double cost = here[index].cost_s + step.added_s;
              const std::int64_t slack = context.extend_slack(here[index].slack, p, b, c, left_kept);
              if (promising(cost, p - c, c, step.backlog_s, slack)) {
                target.push_back({cost, step.backlog_s, slack, state, index, step.replica_backlog_s});
              }
            }
          }
        }
      }
    }
  }
  // Close at p = 0: the first unit's backward, the embedding, the root's reduction, the optimizer, the head.
  DpAnswer answer;
  double best_total = kInf;
  std::size_t best_state = kNone, best_label = kNone;
  for (std::size_t b = 1; b <= m && b <= n; ++b) {
    for (bool kept : kept_options) {
      const std::size_t state = context.state(0, b, kept);
      auto& here = labels[state];
      keep_pareto(here, backlog_monotone, with_floor);
      if (here.size() > kMaxLabelsPerState) {
        DpAnswer overflow;
        overflow.overflow = true;
        return overflow;
      }
      for (std::size_t index = 0; index < here.size(); ++index) {
        if (with_floor && context.close_slack(here[index].slack, b) < 0) continue;
        const double total =
            here[index].cost_s + context.close_cost(b, here[index].backlog_s, here[index].replica_backlog_s);
        if (total < best_total) {
          best_total = total;
          best_state = state;
          best_label = index;
        }
      }
    }
  }
  if (best_state == kNone) return answer;
  // Walk the parents: from the first unit rightwards.
  std::size_t first_block = 0;
  for (std::size_t state = best_state, index = best_label; state != kNone;) {
    const std::size_t length = (state / 2) % (m + 1);
    answer.choices.push_back({first_block, length, state % 2 == 1});
    first_block += length;
    const Label& label = labels[state][index];
    state = label.parent_state;
    index = label.parent_label;
  }
  answer.found = true;
  answer.modelled_step_s = context.exact(to_units(terms, answer.choices), to_kept(answer.choices));
  return answer;
}

}  // namespace shardplan::wrap_internal
