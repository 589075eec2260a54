// The wrap-boundary DP (Note [Wrap DP] in wrap_dp.h): step-time terms over windows of three units, minimised exactly.
#include "wrap_dp.h"

#include <algorithm>
#include <limits>
#include <map>

#include "collective_cost.h"
#include "compute_cost.h"
#include "errors.h"
#include "unit_layout.h"

namespace shardplan {
namespace {

struct UnitCost {
  std::vector<double> forward_ops;   // base durations, in issue order
  std::vector<double> backward_ops;  // recompute + backward per layer, layers descending
  double gather_forward_s = 0;       // its all-gather before forward (0 when parameters are not sharded)
  double gather_backward_s = 0;      // its all-gather before backward (0 when kept gathered from forward)
  double reduce_s = 0;               // its gradient reduction (reduce-scatter, or all-reduce when replicated)
  double replica_reduce_s = 0;       // HSDP: the all-reduce across replicas after the reduce-scatter
  std::int64_t optimizer_elements = 0;
};

std::int64_t round_up(std::int64_t count, int group) {
  const std::int64_t g = std::max(group, 1);
  return (count + g - 1) / g * g;
}

// The simulator's timing of compute ops that run back to back from time 0 while communication streams are busy
// from time 0 for `window_s` (the longest of them: every window in the step model starts where its ops start, see
// Note [Wrap DP]): each op's base interval overlaps the window, the overlapped part is stretched by the slowdown, and
// every op that does work pays the host's dispatch overhead after it (as simulate() does).
double run_ops(const std::vector<double>& ops, double window_s, double slowdown, double dispatch_s) {
  double t = 0;
  for (double base : ops) {
    const double overlapped = std::max(0.0, std::min(t + base, window_s) - t);
    t += base + (base > 0 ? (slowdown - 1.0) * overlapped : 0.0) + dispatch_s;
  }
  return t;
}

class StepTerms {
 public:
  StepTerms(const ModelSpec& model, const Plan& plan, const HardwareProfile& profile, int world, int gpus_per_node)
      : model_(model), plan_(plan), profile_(profile), gpus_per_node_(gpus_per_node) {
    for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
      if (model.layers[layer].kind == LayerKind::transformer_block) blocks_.push_back(layer);
    }
    if (blocks_.empty()) throw InputError("plan search: the model has no transformer blocks to wrap");
    for (std::size_t i = 1; i < blocks_.size(); ++i) {
      if (blocks_[i] != blocks_[i - 1] + 1) throw InputError("plan search: transformer blocks must be consecutive");
    }
    const PlanUnit& unit = plan.units.at(plan.units.size() > 1 ? 1 : 0);
    layout_ = resolve_sharding(unit.strategy, world, gpus_per_node);
    reshard_ = unit.reshard_after_forward;
    hybrid_replicas_ = layout_.grads_sharded() ? world / layout_.grad_group : 1;
    world_ = world;
    // Whether block costs depend only on the unit's length (every block identical), so windows can be cached.
    uniform_ = true;
    for (auto layer : blocks_) {
      const auto& a = model.layers[layer];
      const auto& b = model.layers[blocks_.front()];
      uniform_ = uniform_ && a.param_count() == b.param_count() &&
                 a.flops.matmul_flops_per_token == b.flops.matmul_flops_per_token &&
                 plan.layer_checkpointing[layer] == plan.layer_checkpointing[blocks_.front()];
    }
    std::vector<std::size_t> before, after;
    for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
      if (layer < blocks_.front()) before.push_back(layer);
      if (layer > blocks_.back()) after.push_back(layer);
    }
    std::vector<std::size_t> root_layers = before;
    root_layers.insert(root_layers.end(), after.begin(), after.end());
    root_ = cost_of(root_layers, true);
    root_head_ = cost_of(after, true);
    root_embed_ = cost_of(before, true);
  }

  std::size_t block_count() const { return blocks_.size(); }
  bool uniform() const { return uniform_; }

  const UnitCost& unit(std::size_t first_block, std::size_t count) {
    const auto key = std::make_pair(uniform_ ? 0 : first_block, count);
    auto found = cache_.find(key);
    if (found == cache_.end()) {
      std::vector<std::size_t> layers;
      for (std::size_t b = first_block; b < first_block + count; ++b) layers.push_back(blocks_[b]);
      found = cache_.emplace(key, cost_of(layers, false)).first;
    }
    return found->second;
  }

  // s_f(k+1) − s_f(k) = max(E_f(k | G(k+1)), G(k+1)) (Note [Wrap DP]).
  double forward_step(const UnitCost& unit, double next_gather_s) const {
    return std::max(run(unit.forward_ops, next_gather_s), next_gather_s);
  }

  // One unit's backward (Note [Wrap DP]): its ops start together with the all-gather of the unit below it
  // (`next_gather_s`, 0 when there is none) while `backlog_s` seconds of gradient reductions are still queued.
  struct BackwardStep {
    double step_s = 0;     // s_b(k) − s_b(k−1)
    double backlog_s = 0;  // reductions still queued when the unit below starts (its own included)
  };
  BackwardStep backward_step(const UnitCost& unit, double next_gather_s, double backlog_s) const {
    const double compute = run(unit.backward_ops, std::max(next_gather_s, backlog_s));
    const double step = std::max(compute, next_gather_s);
    // Its reduction is issued when its compute ends and starts when the queue ahead of it has drained.
    return {step, std::max(0.0, std::max(compute, backlog_s) + unit.reduce_s - step)};
  }

  // From the step's start to the first unit's forward: the root's all-gather, then the embedding overlapping the
  // first unit's all-gather.
  double head_terms(const UnitCost& first) const {
    return root_.gather_forward_s + forward_step(root_embed_, first.gather_forward_s);
  }
  // From the last unit's forward end to its backward start: final norm and head forward, then their backward
  // overlapping the last unit's backward all-gather.
  double turn_terms(const UnitCost& last) const {
    return run(root_head_.forward_ops, 0.0) +
           std::max(run(root_head_.backward_ops, last.gather_backward_s), last.gather_backward_s);
  }
  // From the first unit's backward start to the step's end: its backward with `backlog_s` of reductions queued,
  // the embedding's backward overlapping what is still queued, the root's reduction once both are done, then the
  // optimizer step (one op; the units' shares are added by the callers: its time streams bytes, so it is additive).
  double close_terms(const UnitCost& first, double backlog_s) const {
    const BackwardStep last = backward_step(first, 0.0, backlog_s);
    const double embed = run(root_embed_.backward_ops, last.backlog_s);
    return last.step_s + std::max(embed, last.backlog_s) + root_.reduce_s + root_.replica_reduce_s +
           optimizer_time_s(root_.optimizer_elements) + profile_.op_dispatch_overhead_s;
  }
  double slowdown() const { return profile_.overlap_compute_slowdown; }
  // What follows the first unit's reduction in close_terms whatever happens before it: the root's reductions, the
  // root's optimizer share and the optimizer's dispatch.
  double after_reductions_s() const {
    return root_.reduce_s + root_.replica_reduce_s + optimizer_time_s(root_.optimizer_elements) +
           profile_.op_dispatch_overhead_s;
  }
  double optimizer_time_s(std::int64_t elements) const {
    const auto& precision = plan_.training.precision;
    const double bytes =
        static_cast<double>(elements * optimizer_bytes_per_element(precision, plan_.training.optimizer));
    return plan_.offload.params || plan_.offload.optimizer
               ? host_copy_time_s(static_cast<std::int64_t>(bytes), profile_)
               : compute_time_s(LayerWork{0.0, bytes}, precision.param_compute_bytes, profile_);
  }

 private:
  double run(const std::vector<double>& ops, double window_s) const {
    return run_ops(ops, window_s, profile_.overlap_compute_slowdown, profile_.op_dispatch_overhead_s);
  }

  UnitCost cost_of(const std::vector<std::size_t>& layers, bool is_root) const {
    UnitCost cost;
    const auto& training = plan_.training;
    const auto& precision = training.precision;
    const int compute_bytes = precision.param_compute_bytes;
    std::int64_t params = 0;
    for (auto layer : layers) {
      params += model_.layers[layer].param_count();
      cost.forward_ops.push_back(
          compute_time_s(layer_work(model_.layers[layer], training, ComputePass::forward), compute_bytes, profile_));
    }
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      const LayerSpec& spec = model_.layers[*it];
      const ActivationCheckpointing mode =
          spec.kind == LayerKind::transformer_block ? plan_.layer_checkpointing[*it] : ActivationCheckpointing::none;
      const double kept = spec.activation_bytes_per_token(training.seq_len, compute_bytes, training.flash_attention, mode);
      const double full = spec.activation_bytes_per_token(training.seq_len, compute_bytes, training.flash_attention,
                                                          ActivationCheckpointing::none);
      if (mode != ActivationCheckpointing::none &&
          std::llround(full * static_cast<double>(training.tokens_per_micro_batch())) -
                  std::llround(kept * static_cast<double>(training.tokens_per_micro_batch())) > 0) {
        cost.backward_ops.push_back(compute_time_s(layer_work(spec, training, ComputePass::recompute), compute_bytes,
                                                   profile_));
      }
      cost.backward_ops.push_back(compute_time_s(layer_work(spec, training, ComputePass::backward), compute_bytes,
                                                 profile_));
    }
    if (params == 0) return cost;
    const std::int64_t padded = round_up(params, layout_.param_group);
    if (layout_.params_sharded()) {
      const GroupPlacement shard{layout_.param_group, layout_.param_group > gpus_per_node_};
      cost.gather_forward_s = collective_cost(CollectiveKind::all_gather, padded * compute_bytes, shard, profile_).time_s;
      const bool kept_gathered = is_root || !reshard_.enabled;
      if (!kept_gathered) {
        const int group = reshard_.keeps_partial_copy() ? reshard_.group_size : layout_.param_group;
        cost.gather_backward_s = collective_cost(CollectiveKind::all_gather, padded * compute_bytes,
                                                 {group, group > gpus_per_node_}, profile_)
                                     .time_s;
      }
    }
    if (layout_.grads_sharded()) {
      const std::int64_t grad_padded = round_up(params, layout_.grad_group);
      cost.reduce_s = collective_cost(CollectiveKind::reduce_scatter, grad_padded * precision.reduce_bytes,
                                      {layout_.grad_group, layout_.grad_group > gpus_per_node_}, profile_)
                          .time_s;
      if (hybrid_replicas_ > 1) {
        cost.replica_reduce_s =
            collective_cost(CollectiveKind::all_reduce, grad_padded / layout_.grad_group * precision.reduce_bytes,
                            {hybrid_replicas_, world_ > gpus_per_node_}, profile_)
                .time_s;
      }
    } else {
      cost.reduce_s = collective_cost(CollectiveKind::all_reduce, params * precision.reduce_bytes,
                                      {world_, world_ > gpus_per_node_}, profile_)
                          .time_s;
    }
    cost.optimizer_elements = round_up(params, layout_.optimizer_group) / layout_.optimizer_group;
    return cost;
  }

  const ModelSpec& model_;
  const Plan& plan_;
  const HardwareProfile& profile_;
  int gpus_per_node_;
  int world_ = 1;
  ShardingLayout layout_;
  ReshardAfterForward reshard_;
  int hybrid_replicas_ = 1;
  bool uniform_ = true;
  std::vector<std::size_t> blocks_;
  UnitCost root_, root_head_, root_embed_;
  std::map<std::pair<std::size_t, std::size_t>, UnitCost> cache_;

 public:
  std::size_t first_layer_of_block(std::size_t block) const { return blocks_[block]; }
};

}  // namespace

Plan plan_with_units(const ModelSpec& model, const Plan& plan_template, const std::vector<LayerRange>& units) {
  Plan plan = plan_template;
  const PlanUnit unit_template = plan_template.units.at(plan_template.units.size() > 1 ? 1 : 0);
  const PlanUnit root_template = plan_template.units.at(0);
  plan.units.clear();
  const int count = static_cast<int>(units.size()) + 1;
  for (int id = 0; id < count; ++id) {
    PlanUnit unit = id == 0 ? root_template : unit_template;
    if (id > 0) {
      unit.layers = units[static_cast<std::size_t>(id - 1)];
      unit.name = model.layers[unit.layers.begin].name +
                  (unit.layers.end - unit.layers.begin > 1 ? "-" + model.layers[unit.layers.end - 1].name : "");
    }
    // FSDP's one-ahead prefetch (as default_plan sets it).
    unit.forward_prefetch.clear();
    unit.backward_prefetch.clear();
    if (id + 1 < count) unit.forward_prefetch = {id + 1};
    if (id == 0 && count > 1) unit.backward_prefetch = {count - 1};
    if (id >= 2) unit.backward_prefetch = {id - 1};
    plan.units.push_back(std::move(unit));
  }
  return plan;
}

double modelled_step_time_s(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                            int world_size, int gpus_per_node, const std::vector<LayerRange>& units) {
  StepTerms terms(model, plan_template, profile, world_size, gpus_per_node);
  std::vector<const UnitCost*> costs;
  std::size_t block = 0;
  for (const auto& range : units) {
    costs.push_back(&terms.unit(block, range.end - range.begin));
    block += range.end - range.begin;
  }
  SHARDPLAN_CHECK(!costs.empty() && block == terms.block_count(), "units must cover every block");
  const std::size_t count = costs.size();
  double total = terms.head_terms(*costs.front()) + terms.turn_terms(*costs.back());
  for (std::size_t k = 0; k < count; ++k) {
    total += terms.forward_step(*costs[k], k + 1 < count ? costs[k + 1]->gather_forward_s : 0.0) +
             terms.optimizer_time_s(costs[k]->optimizer_elements);
  }
  double backlog = 0;
  for (std::size_t k = count; k-- > 1;) {
    const auto step = terms.backward_step(*costs[k], costs[k - 1]->gather_backward_s, backlog);
    total += step.step_s;
    backlog = step.backlog_s;
  }
  return total + terms.close_terms(*costs.front(), backlog);
}

namespace {

// A partial wrapping from the right end (Note [Wrap DP]): everything right of the leftmost placed unit is final.
struct Label {
  double cost_s;     // every term that no longer depends on units further left
  double backlog_s;  // reductions queued when the leftmost placed unit's backward starts
  std::size_t parent_state;
  std::size_t parent_label;
};

// Drops labels another label dominates (no more cost, no more backlog). Sound when the rest of the step never gets
// shorter as the backlog grows, which holds for a slowdown of at most 2 (Note [Wrap DP]); above that only exact
// backlog ties are merged.
void keep_pareto(std::vector<Label>& labels, bool backlog_monotone) {
  std::sort(labels.begin(), labels.end(), [](const Label& a, const Label& b) {
    return a.cost_s != b.cost_s ? a.cost_s < b.cost_s : a.backlog_s < b.backlog_s;
  });
  std::vector<Label> kept;
  for (const Label& label : labels) {
    const bool dominated = std::any_of(kept.begin(), kept.end(), [&](const Label& better) {
      return backlog_monotone ? better.backlog_s <= label.backlog_s : better.backlog_s == label.backlog_s;
    });
    if (!dominated) kept.push_back(label);
  }
  labels = std::move(kept);
}

}  // namespace

WrapDpResult best_wrapping(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                           int world_size, int gpus_per_node, const WrapDpOptions& options) {
  StepTerms terms(model, plan_template, profile, world_size, gpus_per_node);
  const std::size_t n = terms.block_count();
  const std::size_t m = static_cast<std::size_t>(std::max(1, options.max_unit_blocks));
  const bool backlog_monotone = terms.slowdown() <= 2.0;
  // State (p, b): the leftmost placed unit spans blocks [p, p + b); labels[p * (m + 1) + b].
  const std::size_t width = m + 1;
  std::vector<std::vector<Label>> labels((n + 1) * width);
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    const UnitCost& last = terms.unit(n - b, b);
    labels[(n - b) * width + b].push_back({terms.turn_terms(last) + terms.forward_step(last, 0.0) +
                                               terms.optimizer_time_s(last.optimizer_elements),
                                           0.0, kNone, kNone});
  }
  // Bounds (Note [Wrap DP]): below[p * width + b] is a lower bound of everything still to add to a label at state
  // (p, b) — the same terms with the backlog reset to 0 at every unit, which never lengthens the rest of the step
  // (the rest is nondecreasing in the backlog) — and the exact time of the partition that bound picks is an upper
  // bound of the optimum. A label whose cost plus its lower bound exceeds the upper bound is dropped.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> below((n + 1) * width, kInf);
  std::vector<std::size_t> below_next((n + 1) * width, 0);
  for (std::size_t b = 1; b <= m && b <= n; ++b) {
    const UnitCost& first = terms.unit(0, b);
    below[b] = terms.head_terms(first) + terms.close_terms(first, 0.0);
  }
  for (std::size_t p = 1; p < n; ++p) {
    for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
      const UnitCost& unit = terms.unit(p, b);
      for (std::size_t c = 1; c <= m && c <= p; ++c) {
        const UnitCost& left = terms.unit(p - c, c);
        const double value = below[(p - c) * width + c] + terms.backward_step(unit, left.gather_backward_s, 0.0).step_s +
                             terms.forward_step(left, unit.gather_forward_s) +
                             terms.optimizer_time_s(left.optimizer_elements);
        if (value < below[p * width + b]) {
          below[p * width + b] = value;
          below_next[p * width + b] = c;
        }
      }
    }
  }
  // A second lower bound, tight where reductions dominate: the reduction stream still has the backlog, this unit's
  // reduction, every unit's to its left and the root's to run, one after another, before the optimizer; and the
  // forward steps of the units to the left come before all of it. reductions_left[p * width + b]: the least forward
  // steps + optimizer shares + reductions of any wrapping of the blocks left of p, given the unit at p has b blocks.
  std::vector<double> reductions_left((n + 1) * width, kInf);
  for (std::size_t b = 1; b <= m && b <= n; ++b) reductions_left[b] = terms.head_terms(terms.unit(0, b));
  for (std::size_t p = 1; p < n; ++p) {
    for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
      const UnitCost& unit = terms.unit(p, b);
      for (std::size_t c = 1; c <= m && c <= p; ++c) {
        const UnitCost& left = terms.unit(p - c, c);
        reductions_left[p * width + b] =
            std::min(reductions_left[p * width + b], reductions_left[(p - c) * width + c] +
                                                         terms.forward_step(left, unit.gather_forward_s) +
                                                         terms.optimizer_time_s(left.optimizer_elements) + left.reduce_s);
      }
    }
  }
  const double after_reductions = terms.after_reductions_s();
  const auto lower_bound = [&](std::size_t p, std::size_t b, double backlog_s) {
    const std::size_t state = p * width + b;
    return std::max(below[state],
                    reductions_left[state] + backlog_s + terms.unit(p, b).reduce_s + after_reductions);
  };
  double upper_bound = kInf;
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    if (below[(n - b) * width + b] == kInf) continue;
    std::vector<LayerRange> units;
    std::size_t p = n - b, length = b;
    while (true) {
      units.insert(units.begin(), {p, p + length});
      if (p == 0) break;
      const std::size_t c = below_next[p * width + length];
      p -= c;
      length = c;
    }
    for (auto& unit : units) {
      unit.begin += terms.first_layer_of_block(0);
      unit.end += terms.first_layer_of_block(0);
    }
    upper_bound = std::min(upper_bound, modelled_step_time_s(model, plan_template, profile, world_size, gpus_per_node, units));
  }
  const double prune_above = upper_bound * (1.0 + 1e-9);  // keep the optimum through rounding
  const auto promising = [&](double cost_s, std::size_t p, std::size_t b, double backlog_s) {
    return cost_s + lower_bound(p, b, backlog_s) <= prune_above;
  };
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    auto& start = labels[(n - b) * width + b];
    if (!start.empty() && !promising(start.front().cost_s, n - b, b, 0.0)) start.clear();
  }
  // Right to left: a state's labels are final once every state with a larger p has been expanded.
  for (std::size_t p = n; p-- > 1;) {
    for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
      const std::size_t state = p * width + b;
      auto& here = labels[state];
      if (here.empty()) continue;
      keep_pareto(here, backlog_monotone);
      const UnitCost& unit = terms.unit(p, b);
      for (std::size_t c = 1; c <= m && c <= p; ++c) {
        const UnitCost& left = terms.unit(p - c, c);
        // The unit at p now has its neighbour below: its backward step is final, and so is the left unit's
        // forward step (its right neighbour is known).
        const double forward = terms.forward_step(left, unit.gather_forward_s) + terms.optimizer_time_s(left.optimizer_elements);
        auto& target = labels[(p - c) * width + c];
        for (std::size_t index = 0; index < here.size(); ++index) {
          const auto step = terms.backward_step(unit, left.gather_backward_s, here[index].backlog_s);
          const double cost = here[index].cost_s + step.step_s + forward;
          if (promising(cost, p - c, c, step.backlog_s)) target.push_back({cost, step.backlog_s, state, index});
        }
      }
    }
  }
  // Close at p = 0: the first unit's backward, the embedding, the root's reduction, the optimizer, the head.
  WrapDpResult result;
  double best_total = std::numeric_limits<double>::infinity();
  std::size_t best_state = kNone, best_label = kNone;
  for (std::size_t b = 1; b <= m && b <= n; ++b) {
    auto& here = labels[b];
    keep_pareto(here, backlog_monotone);
    const UnitCost& first = terms.unit(0, b);
    const double head = terms.head_terms(first);
    for (std::size_t index = 0; index < here.size(); ++index) {
      const double total = here[index].cost_s + head + terms.close_terms(first, here[index].backlog_s);
      if (total < best_total) {
        best_total = total;
        best_state = b;
        best_label = index;
      }
    }
  }
  if (best_state == kNone) return result;
  // Walk the parents: from the first unit rightwards.
  std::size_t layer = terms.first_layer_of_block(0);
  for (std::size_t state = best_state, index = best_label; state != kNone;) {
    const std::size_t length = state % width;
    result.units.push_back({layer, layer + length});
    layer += length;
    const Label& label = labels[state][index];
    state = label.parent_state;
    index = label.parent_label;
  }
  result.found = true;
  result.modelled_step_s = modelled_step_time_s(model, plan_template, profile, world_size, gpus_per_node, result.units);
  return result;
}

}  // namespace shardplan
