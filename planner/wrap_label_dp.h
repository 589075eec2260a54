// The label DP shared by both wrap searches (Note [Wrap DP], Note [Wrap search] in wrap_dp.h): time bounds, the
// search context (step terms, bounds, memory-floor budget, the kept-suffix choice), labels and their Pareto sets.
// Internal to planner/.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "wrap_dp.h"
#include "wrap_memory_floor.h"
#include "wrap_step_terms.h"

namespace shardplan::wrap_internal {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// The bounds of Note [Wrap DP] for states (p, b): the leftmost placed unit spans blocks [p, p + b).
class WrapBounds {
 public:
  // keep_choice: units may be kept gathered (no backward all-gather), so the bounds take every backward all-gather
  // as 0 (a step never gets longer with a shorter all-gather).
  WrapBounds(StepTerms& terms, std::size_t n, std::size_t m, bool keep_choice,
             const std::function<double(const std::vector<LayerRange>&)>& exact)
      : terms_(terms), width_(m + 1), reset_((n + 1) * width_, kInf), reductions_left_((n + 1) * width_, kInf) {
    // reset_: everything still to add to a label, with the backlog reset to 0 at every unit (never longer than the
    // real rest, which is nondecreasing in the backlog).
    std::vector<std::size_t> next((n + 1) * width_, 0);
    for (std::size_t b = 1; b <= m && b <= n; ++b) {
      const UnitCost& first = terms.unit(0, b);
      reset_[b] = terms.head_terms(first, prefetches(0, b, n, first)) + terms.close_terms(first, 0.0);
      reductions_left_[b] = terms.head_terms(first, prefetches(0, b, n, first));
    }
    for (std::size_t p = 1; p < n; ++p) {
      for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
        const UnitCost& unit = terms.unit(p, b);
        for (std::size_t c = 1; c <= m && c <= p; ++c) {
          const UnitCost& left = terms.unit(p - c, c);
          const double forward = terms.forward_step(left, unit.gather_forward_s, prefetches(p, b, n, unit)) +
                                 terms.optimizer_time_s(left.optimizer_elements);
          const double value = reset_[(p - c) * width_ + c] + forward +
                               terms.backward_step(unit, keep_choice ? 0.0 : left.gather_backward_s, 0.0).step_s;
          if (value < reset_[p * width_ + b]) {
            reset_[p * width_ + b] = value;
            next[p * width_ + b] = c;
          }
          // reductions_left_: the least forward steps + optimizer shares + reductions of the units left of p.
          reductions_left_[p * width_ + b] =
              std::min(reductions_left_[p * width_ + b], reductions_left_[(p - c) * width_ + c] + forward + left.reduce_s);
        }
      }
    }
    after_reductions_ = terms.after_reductions_s();
    // The exact time of the partition the reset bound picks: an upper bound of the optimum.
    for (std::size_t b = 1; b <= std::min(m, n); ++b) {
      if (reset_[(n - b) * width_ + b] == kInf) continue;
      std::vector<LayerRange> units;
      for (std::size_t p = n - b, length = b;;) {
        units.insert(units.begin(), {terms.first_layer_of_block(p), terms.first_layer_of_block(p) + length});
        if (p == 0) break;
        const std::size_t c = next[p * width_ + length];
        p -= c;
        length = c;
      }
      upper_bound_ = std::min(upper_bound_, exact(units));
    }
  }

  // A lower bound of everything a label at (p, b) with this backlog still adds: the larger of the reset bound and
  // the reduction stream's remaining work (the backlog, this unit's reduction, those to its left and the root's,
  // one after another, after the forward steps of the units to the left).
  double lower_bound(std::size_t p, std::size_t b, double backlog_s) const {
    const std::size_t state = p * width_ + b;
    return std::max(reset_[state], reductions_left_[state] + backlog_s + terms_.unit(p, b).reduce_s + after_reductions_);
  }
  double upper_bound() const { return upper_bound_; }

  // Whether the unit spanning [p, p + b) issues the next unit's all-gather in forward: there is a next unit (every
  // block unit shards alike, so it gathers when this one does).
  static bool prefetches(std::size_t p, std::size_t b, std::size_t n, const UnitCost& unit) {
    return p + b < n && unit.gather_forward_s > 0;
  }

 private:
  StepTerms& terms_;
  std::size_t width_;
  std::vector<double> reset_, reductions_left_;
  double after_reductions_ = 0;
  double upper_bound_ = kInf;
};


// A wrapping as (first block, length, kept gathered) per unit, left to right.
struct UnitChoice {
  std::size_t first_block;
  std::size_t length;
  bool kept;
};

inline std::vector<LayerRange> to_units(const StepTerms& terms, const std::vector<UnitChoice>& choices) {
  std::vector<LayerRange> units;
  for (const auto& choice : choices) {
    units.push_back({terms.first_layer_of_block(choice.first_block),
                     terms.first_layer_of_block(choice.first_block) + choice.length});
  }
  return units;
}
// The wrapping a best-first search node stands for: its units from the leftmost placed one rightwards, through the
// nodes' parents (`Node` has `leftmost` and `parent`, kNone at the last unit).
template <class Node>
std::vector<UnitChoice> wrapping_of(const std::vector<Node>& nodes, std::size_t index) {
  std::vector<UnitChoice> choices;
  for (std::size_t at = index; at != kNone; at = nodes[at].parent) choices.push_back(nodes[at].leftmost);
  return choices;
}
inline std::vector<bool> to_kept(const std::vector<UnitChoice>& choices) {
  std::vector<bool> kept;
  for (const auto& choice : choices) kept.push_back(choice.kept);
  return kept;
}

// What both searches share: the step terms, the time bounds, and the memory floor's budget (Note [Wrap search]).
struct WrapContext {
  WrapContext(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile, int world_size,
              int gpus_per_node, int max_unit_blocks, std::int64_t memory_cap_bytes, bool per_unit_reshard)
      : terms(model, plan_template, profile, world_size, gpus_per_node),
        n(terms.block_count()),
        m(static_cast<std::size_t>(std::max(1, max_unit_blocks))),
        keep_choice(per_unit_reshard && terms.reshard_choice()),
        template_kept(!plan_template.units.at(plan_template.units.size() > 1 ? 1 : 0).reshard_after_forward.enabled),
        exact([&model, &plan_template, &profile, world_size, gpus_per_node](const std::vector<LayerRange>& units,
                                                                              const std::vector<bool>& kept) {
          return modelled_step_time_s(model, plan_template, profile, world_size, gpus_per_node, units, kept);
        }),
        bounds(terms, n, m, keep_choice,
               [this](const std::vector<LayerRange>& units) { return exact(units, std::vector<bool>{}); }),
        floor(model, plan_template, terms, world_size, gpus_per_node, profile.context_overhead_bytes) {
    // The least shards any wrapping of the first p blocks holds (padding differs between wrappings): the budget is
    // the cap less all of them and the constant part.
    least_persistent.assign(n + 1, std::numeric_limits<std::int64_t>::max());
    least_persistent[0] = 0;
    for (std::size_t p = 1; p <= n; ++p) {
      for (std::size_t c = 1; c <= m && c <= p; ++c) {
        least_persistent[p] = std::min(least_persistent[p], least_persistent[p - c] + floor.sizes(p - c, c).persistent);
      }
    }
    if (memory_cap_bytes > 0) budget_bytes = memory_cap_bytes - floor.constant_bytes() - least_persistent[n];
  }

  // The kept flags a unit may take. Units kept gathered form a suffix of the model (the last units, whose backward
  // comes first — what FSDP2 users keep, and what bounds the search: any subset explodes the labels), so a unit may
  // be kept only when the unit after it is.
  std::vector<bool> kept_options() const {
    if (keep_choice) return {false, true};
    return {template_kept};
  }
  bool may_follow(bool right_kept, bool left_kept) const { return !keep_choice || right_kept || !left_kept; }
  // The units that may stand left of `unit`: 1 to m blocks ending where it begins, with each kept flag the suffix
  // rule allows — the one expansion step both best-first searches take (wrap_search.cpp, wrap_memory_search.cpp).
  template <class Visit>
  void for_each_left_neighbour(const UnitChoice& unit, Visit&& visit) const {
    for (std::size_t c = 1; c <= m && c <= unit.first_block; ++c) {
      for (bool left_kept : {false, true}) {
        if ((!keep_choice && left_kept != template_kept) || !may_follow(unit.kept, left_kept)) continue;
        visit(UnitChoice{unit.first_block - c, c, left_kept});
      }
    }
  }
  std::size_t state(std::size_t p, std::size_t b, bool kept) const { return (p * (m + 1) + b) * 2 + (kept ? 1 : 0); }

  double gather_backward(std::size_t p, std::size_t b, bool kept) {
    return kept ? 0.0 : terms.unit(p, b).gather_backward_s;
  }
  // Note [Wrap search]: `slack` is the least, over the memory terms known so far, of the budget less the term less
  // the parameters of the units kept gathered below it that are placed; placing a unit kept gathered lowers it for
  // every unit above. A wrapping fits the floor only if its slack never goes below 0.
  std::int64_t last_unit_slack(std::size_t b, bool kept) {
    const auto& last = floor.sizes(n - b, b);
    return budget_bytes - std::max(MemoryFloor::forward_term(last, nullptr), floor.turn_term(last, kept));
  }
  // `held_above_bytes`: what reduce-scatters of units above (p, b) still hold in its backward (MemoryFloor::
  // backward_term). The label DP passes 0 — its states do not know the unit above, and the distinct slacks that
  // knowing it gives outgrew the kept choice's label budget (measured: GPT-2's 12 blocks on 2x8xH100) — the
  // best-first search and whole wrappings pass it.
  std::int64_t extend_slack(std::int64_t slack, std::size_t p, std::size_t b, std::size_t c, bool left_kept,
                            std::int64_t held_above_bytes = 0) {
    const auto& sizes = floor.sizes(p, b);
    const auto& left = floor.sizes(p - c, c);
    std::int64_t above =
        std::min(slack, budget_bytes - MemoryFloor::backward_term(sizes, neighbours_gathered ? &left : nullptr,
                                                                  left_kept, held_above_bytes));
    if (left_kept) above -= left.gathered;
    return std::min(above, budget_bytes - MemoryFloor::forward_term(left, neighbours_gathered ? &sizes : nullptr));
  }
  std::int64_t close_slack(std::int64_t slack, std::size_t b, std::int64_t held_above_bytes = 0) {
    return std::min(slack,
                    budget_bytes - MemoryFloor::backward_term(floor.sizes(0, b), nullptr, false, held_above_bytes));
  }
  // The reduce-scatter input of the unit right above a unit, alive through all of its backward.
  std::int64_t held_by(const UnitChoice& above) { return floor.sizes(above.first_block, above.length).held_grad; }

  double last_unit_cost(std::size_t b, bool kept) {
    const UnitCost& last = terms.unit(n - b, b);
    return terms.turn_terms(last, kept) + terms.forward_step(last, 0.0) + terms.optimizer_time_s(last.optimizer_elements);
  }
  // Placing (p − c, c, left_kept) left of (p, b): the cost added, the backlog left for it, and how long (p, b)'s own
  // backward ops run.
  struct Extension {
    double added_s;
    double backlog_s;
    double unit_ops_end_s;  // when (p, b)'s backward ops end, from the end of its wait
    double replica_backlog_s;
  };
  Extension extend(std::size_t p, std::size_t b, std::size_t c, bool left_kept, double backlog_s,
                   double replica_backlog_s) {
    return extend(p, b, c, left_kept, backlog_s, replica_backlog_s, left_forward_s(p, b, c));
  }
  // The same with the left unit's forward step and optimizer share, which no label changes, computed once.
  Extension extend(std::size_t p, std::size_t b, std::size_t c, bool left_kept, double backlog_s,
                   double replica_backlog_s, double left_forward) {
    const UnitCost& unit = terms.unit(p, b);
    const UnitCost& left = terms.unit(p - c, c);
    const auto step = terms.backward_step(unit, left_kept ? 0.0 : left.gather_backward_s, backlog_s, replica_backlog_s);
    return {step.step_s + left_forward, step.backlog_s, step.ops_end_s, step.replica_backlog_s};
  }
  double left_forward_s(std::size_t p, std::size_t b, std::size_t c) {
    const UnitCost& unit = terms.unit(p, b);
    const UnitCost& left = terms.unit(p - c, c);
    return terms.forward_step(left, unit.gather_forward_s, WrapBounds::prefetches(p, b, n, unit)) +
           terms.optimizer_time_s(left.optimizer_elements);
  }
  // Closing with (0, b) as the first unit: what the head and the tail add.
  double close_cost(std::size_t b, double backlog_s, double replica_backlog_s) {
    const UnitCost& first = terms.unit(0, b);
    return terms.head_terms(first, WrapBounds::prefetches(0, b, n, first)) +
           terms.close_terms(first, backlog_s, replica_backlog_s);
  }
  // The slack of a complete wrapping (Note [Wrap search]).
  std::int64_t wrapping_slack(const std::vector<UnitChoice>& choices) {
    const std::size_t last = choices.size() - 1;
    std::int64_t slack = last_unit_slack(choices[last].length, choices[last].kept);
    for (std::size_t k = last; k > 0; --k) {
      slack = extend_slack(slack, choices[k].first_block, choices[k].length, choices[k - 1].length, choices[k - 1].kept,
                           k < last ? held_by(choices[k + 1]) : 0);
    }
    return close_slack(slack, choices[0].length, last > 0 ? held_by(choices[1]) : 0);
  }

  StepTerms terms;
  std::size_t n, m;
  bool keep_choice;    // each unit chooses reshard_after_forward (Note [Wrap search])
  bool template_kept;  // otherwise every unit is as the template says
  std::function<double(const std::vector<LayerRange>&, const std::vector<bool>&)> exact;
  WrapBounds bounds;
  MemoryFloor floor;
  std::int64_t budget_bytes = std::numeric_limits<std::int64_t>::max() / 4;  // no cap: never binding
  std::vector<std::int64_t> least_persistent;  // by blocks [0, p): the least shards a wrapping of them holds
  // The floor counts the neighbour a one-ahead prefetch holds gathered (WrapSearchOptions::floor_holds_neighbours).
  bool neighbours_gathered = true;
};

// A partial wrapping from the right end (Note [Wrap DP]): everything right of the leftmost placed unit is final.
struct Label {
  double cost_s;       // every term that no longer depends on units further left
  double backlog_s;    // reductions queued when the leftmost placed unit's backward starts
  std::int64_t slack;  // Note [Wrap search]
  std::size_t parent_state;
  std::size_t parent_label;
  double replica_backlog_s = 0;  // HSDP: when the all-reduces across replicas queued then end
};

struct DpAnswer {
  std::vector<UnitChoice> choices;
  double modelled_step_s = 0;
  bool found = false;
  bool overflow = false;  // a state's labels outgrew kMaxLabelsPerState: no answer
};

// With per-unit reshard and a memory floor, labels differ in three ways (cost, backlog, slack) and a state can hold
// very many; past this the DP stops and the caller searches without the per-unit choice.
constexpr std::size_t kMaxLabelsPerState = 128;

// Drops labels another label dominates (no more cost, no more backlog, no less slack, no more replica backlog). Sound
// when the rest of the step never gets shorter as the backlog grows, which holds for a slowdown of at most 2 (Note
// [Wrap DP]); above that only exact backlog ties are merged. Slack only ever decreases along a wrapping; the replica
// backlog only delays the all-reduces and the optimizer behind them.
void keep_pareto(std::vector<Label>& labels, bool backlog_monotone, bool with_slack);

// The fastest wrapping (with a cap: among those the memory floor allows), by the label DP.
DpAnswer label_dp(WrapContext& context, bool with_floor);

}  // namespace shardplan::wrap_internal
