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

double overlap_s(double start, double end, double window_start, double window_end) {
  return std::max(0.0, std::min(end, window_end) - std::max(start, window_start));
}

// The simulator's stretch rule applied to ops that run back to back from time 0 while collectives occupy [0, a)
// and [b0, b0 + b) on two other streams: each op is slowed by the factor for its overlap with the busier of the two.
double run_ops(const std::vector<double>& ops, double first_window_s, double second_window_s, double slowdown,
               double second_window_start_s = 0.0) {
  double t = 0;
  for (double base : ops) {
    if (base <= 0) continue;
    const double overlapped =
        std::max(overlap_s(t, t + base, 0.0, first_window_s),
                 overlap_s(t, t + base, second_window_start_s, second_window_start_s + second_window_s));
    t += base + (slowdown - 1.0) * overlapped;
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

  // max(E_f(k | G(next)), G(next)).
  double forward_step(const UnitCost& unit, double next_gather_s) const {
    return std::max(run_ops(unit.forward_ops, next_gather_s, 0.0, profile_.overlap_compute_slowdown), next_gather_s);
  }
  // max(E_b(k | G(next), R(previous)), G(next)).
  double backward_step(const UnitCost& unit, double next_gather_s, double previous_reduce_s) const {
    return std::max(run_ops(unit.backward_ops, next_gather_s, previous_reduce_s, profile_.overlap_compute_slowdown),
                    next_gather_s);
  }

    // Terms of the step that involve no unit or only the first/last one (see Note [Wrap DP]).
  double head_terms(const UnitCost& first) const {
    // Root all-gather, then the embedding overlapping the first unit's all-gather.
    return root_.gather_forward_s + forward_step(root_embed_, first.gather_forward_s);
  }
  double turn_terms(const UnitCost& last) const {
    // Final norm and head forward, then their backward overlapping the last unit's backward all-gather.
    return run_ops(root_head_.forward_ops, 0, 0, 1.0) + backward_step(root_head_, last.gather_backward_s, 0.0);
  }
  // From the end of the first unit's backward to the step's end. Its reduction queues behind the second unit's when
  // that one is still running (`second` = nullptr when there is a single unit); the embedding's backward overlaps it;
  // then the root's reduction and the root's share of the optimizer step (each unit adds its own share: the step
  // streams bytes, so its time is additive).
  double tail_terms(const UnitCost& first, const UnitCost* second) const {
    const double first_backward = backward_step(first, 0.0, second != nullptr ? second->reduce_s : 0.0);
    const double delay = second != nullptr ? std::max(0.0, second->reduce_s - first_backward) : 0.0;
    const double embed =
        run_ops(root_embed_.backward_ops, 0.0, first.reduce_s, profile_.overlap_compute_slowdown, delay);
    return std::max(embed, delay + first.reduce_s) + root_.reduce_s + root_.replica_reduce_s +
           optimizer_time_s(root_.optimizer_elements);
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
  double total = terms.head_terms(*costs.front()) + terms.turn_terms(*costs.back()) +
                 terms.tail_terms(*costs.front(), costs.size() > 1 ? costs[1] : nullptr);
  for (std::size_t k = 0; k < count; ++k) {
    const double next_forward = k + 1 < count ? costs[k + 1]->gather_forward_s : 0.0;
    const double next_backward = k > 0 ? costs[k - 1]->gather_backward_s : 0.0;
    const double previous_reduce = k + 1 < count ? costs[k + 1]->reduce_s : 0.0;
    total += terms.forward_step(*costs[k], next_forward) +
             terms.backward_step(*costs[k], next_backward, previous_reduce) +
             terms.optimizer_time_s(costs[k]->optimizer_elements);
  }
  return total;
}

WrapDpResult best_wrapping(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                           int world_size, int gpus_per_node, const WrapDpOptions& options) {
  StepTerms terms(model, plan_template, profile, world_size, gpus_per_node);
  const std::size_t n = terms.block_count();
  const std::size_t m = static_cast<std::size_t>(std::max(1, options.max_unit_blocks));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[i][a][b]: minimum of the terms finalised so far when i blocks are placed, the last unit has length b and
  // the one before length a (a = 0: there is none). Finalised: head terms, and for every unit but the last two,
  // its forward step (needs the next unit) and backward step (needs the next and the previous unit).
  const std::size_t width = m + 1;
  const auto index = [&](std::size_t i, std::size_t a, std::size_t b) { return (i * width + a) * width + b; };
  std::vector<double> best((n + 1) * width * width, kInf);
  std::vector<std::size_t> parent(best.size(), 0);
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    const UnitCost& first = terms.unit(0, b);
    // The tail depends on the first two units: added when the second is placed (or at the close for a single unit).
    best[index(b, 0, b)] = terms.head_terms(first) + terms.optimizer_time_s(first.optimizer_elements);
  }
  // With identical blocks the window terms depend only on unit lengths: cache them (a: before, b: unit, c: after).
  std::vector<double> forward_cache(width * width, -1.0), backward_cache(width * width * width, -1.0);
  const auto forward_term = [&](std::size_t start_b, std::size_t b, std::size_t c) {
    double* slot = terms.uniform() ? &forward_cache[b * width + c] : nullptr;
    if (slot != nullptr && *slot >= 0) return *slot;
    const double value = terms.forward_step(terms.unit(start_b, b), terms.unit(start_b + b, c).gather_forward_s);
    if (slot != nullptr) *slot = value;
    return value;
  };
  const auto backward_term = [&](std::size_t start_b, std::size_t a, std::size_t b, std::size_t c) {
    double* slot = terms.uniform() ? &backward_cache[(a * width + b) * width + c] : nullptr;
    if (slot != nullptr && *slot >= 0) return *slot;
    const double previous_gather = a > 0 ? terms.unit(start_b - a, a).gather_backward_s : 0.0;
    const double value = terms.backward_step(terms.unit(start_b, b), previous_gather,
                                             terms.unit(start_b + b, c).reduce_s);
    if (slot != nullptr) *slot = value;
    return value;
  };
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t a = 0; a <= m; ++a) {
      for (std::size_t b = 1; b <= m && b <= i; ++b) {
        const double here = best[index(i, a, b)];
        if (here == kInf) continue;
        const UnitCost& last = terms.unit(i - b, b);
        for (std::size_t c = 1; c <= m && i + c <= n; ++c) {
          const UnitCost& next = terms.unit(i, c);
          // Unit b is now between a (before it) and c (after it): both its steps are final.
          const double tail = i == b ? terms.tail_terms(last, &next) : 0.0;  // `last` is the first unit
          const double value = here + tail + forward_term(i - b, b, c) + backward_term(i - b, a, b, c) +
                               terms.optimizer_time_s(next.optimizer_elements);
          const std::size_t target = index(i + c, b, c);
          if (value < best[target]) {
            best[target] = value;
            parent[target] = a;
          }
        }
      }
    }
  }
  // Close: the last unit's steps (no unit after it), the turn at the head, the tail.
  WrapDpResult result;
  double best_total = kInf;
  std::size_t best_a = 0, best_b = 0;
  for (std::size_t a = 0; a <= m; ++a) {
    for (std::size_t b = 1; b <= m && b <= n; ++b) {
      const double here = best[index(n, a, b)];
      if (here == kInf) continue;
      const UnitCost& last = terms.unit(n - b, b);
      const double previous_gather = a > 0 ? terms.unit(n - b - a, a).gather_backward_s : 0.0;
      const double single_unit_tail = b == n ? terms.tail_terms(last, nullptr) : 0.0;
      const double value = here + single_unit_tail + terms.forward_step(last, 0.0) +
                           terms.backward_step(last, previous_gather, 0.0) + terms.turn_terms(last);
      if (value < best_total) {
        best_total = value;
        best_a = a;
        best_b = b;
      }
    }
  }
  if (best_total == kInf) return result;
  // Walk back to recover the units.
  std::vector<std::size_t> lengths;
  std::size_t i = n, a = best_a, b = best_b;
  while (i > 0) {
    lengths.push_back(b);
    const std::size_t before = a > 0 ? parent[index(i, a, b)] : 0;
    i -= b;
    b = a;
    a = before;
  }
  std::reverse(lengths.begin(), lengths.end());
  std::size_t layer = terms.first_layer_of_block(0);
  for (auto length : lengths) {
    result.units.push_back({layer, layer + length});
    layer += length;
  }
  result.found = true;
  result.modelled_step_s = modelled_step_time_s(model, plan_template, profile, world_size, gpus_per_node, result.units);
  return result;
}

}  // namespace shardplan
