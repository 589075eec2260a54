// The wrap-boundary DP (Note [Wrap DP] in wrap_dp.h) and the fastest fitting wrapping (Note [Wrap search]).
#include "wrap_dp.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <queue>

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

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// Units as layer ranges from (first block, length) pairs, left to right.
std::vector<LayerRange> to_units(const StepTerms& terms, const std::vector<std::pair<std::size_t, std::size_t>>& blocks) {
  std::vector<LayerRange> units;
  for (const auto& [first, length] : blocks) {
    units.push_back({terms.first_layer_of_block(first), terms.first_layer_of_block(first) + length});
  }
  return units;
}

// The bounds of Note [Wrap DP] for states (p, b): the leftmost placed unit spans blocks [p, p + b).
class WrapBounds {
 public:
  WrapBounds(StepTerms& terms, std::size_t n, std::size_t m, const std::function<double(const std::vector<LayerRange>&)>& exact)
      : terms_(terms), width_(m + 1), reset_((n + 1) * width_, kInf), reductions_left_((n + 1) * width_, kInf) {
    // reset_: everything still to add to a label, with the backlog reset to 0 at every unit (never longer than the
    // real rest, which is nondecreasing in the backlog).
    std::vector<std::size_t> next((n + 1) * width_, 0);
    for (std::size_t b = 1; b <= m && b <= n; ++b) {
      const UnitCost& first = terms.unit(0, b);
      reset_[b] = terms.head_terms(first) + terms.close_terms(first, 0.0);
      reductions_left_[b] = terms.head_terms(first);
    }
    for (std::size_t p = 1; p < n; ++p) {
      for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
        const UnitCost& unit = terms.unit(p, b);
        for (std::size_t c = 1; c <= m && c <= p; ++c) {
          const UnitCost& left = terms.unit(p - c, c);
          const double forward = terms.forward_step(left, unit.gather_forward_s) + terms.optimizer_time_s(left.optimizer_elements);
          const double value = reset_[(p - c) * width_ + c] + forward +
                               terms.backward_step(unit, left.gather_backward_s, 0.0).step_s;
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
      std::vector<std::pair<std::size_t, std::size_t>> blocks;
      for (std::size_t p = n - b, length = b;;) {
        blocks.insert(blocks.begin(), {p, length});
        if (p == 0) break;
        const std::size_t c = next[p * width_ + length];
        p -= c;
        length = c;
      }
      upper_bound_ = std::min(upper_bound_, exact(to_units(terms, blocks)));
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

 private:
  StepTerms& terms_;
  std::size_t width_;
  std::vector<double> reset_, reductions_left_;
  double after_reductions_ = 0;
  double upper_bound_ = kInf;
};

// Sound lower bounds of the simulated peak (Note [Wrap search]), per unit and per pair of neighbouring units.
class MemoryFloor {
 public:
  MemoryFloor(const ModelSpec& model, const Plan& plan, const StepTerms& terms, int world, int gpus_per_node,
              std::int64_t context_overhead_bytes)
      : model_(model), plan_(plan), terms_(terms), world_(world), gpus_per_node_(gpus_per_node) {
    const auto& training = plan.training;
    std::int64_t running = 0;
    for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
      const ActivationCheckpointing mode = model.layers[layer].kind == LayerKind::transformer_block
                                               ? plan.layer_checkpointing[layer]
                                               : ActivationCheckpointing::none;
      // The lowering's kept bytes per forward op (lowering.cpp, kept_bytes).
      running += static_cast<std::int64_t>(std::llround(
          model.layers[layer].activation_bytes_per_token(training.seq_len, training.precision.param_compute_bytes,
                                                         training.flash_attention, mode) *
          static_cast<double>(training.tokens_per_micro_batch())));
      activations_through_.push_back(running);
      // What a checkpointed layer's recompute allocates again before its backward (lowering.cpp, backward_pass).
      const auto full = static_cast<std::int64_t>(std::llround(
          model.layers[layer].activation_bytes_per_token(training.seq_len, training.precision.param_compute_bytes,
                                                         training.flash_attention, ActivationCheckpointing::none) *
          static_cast<double>(training.tokens_per_micro_batch())));
      const std::int64_t kept = running - (activations_through_.size() > 1 ? activations_through_[activations_through_.size() - 2] : 0);
      rebuilt_.push_back(mode != ActivationCheckpointing::none ? std::max<std::int64_t>(0, full - kept) : 0);
    }
    std::int64_t root_params = 0;
    for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
      if (model.layers[layer].kind != LayerKind::transformer_block) root_params += model.layers[layer].param_count();
    }
    const UnitLayout root = unit_layout(plan.units.front(), root_params, training.precision, world, gpus_per_node);
    constant_bytes_ = persistent_bytes(root) + context_overhead_bytes + (root.gathers ? root.gathered_bytes : 0);
  }

  struct Sizes {
    std::int64_t persistent = 0;  // its shards: params, grads, optimizer states
    std::int64_t gathered = 0;    // its gathered parameters while in use
    std::int64_t grad_copy = 0;   // its full-size gradient during backward
    std::int64_t activations_through = 0;  // every layer's kept activations up to its last layer
    std::int64_t top_rebuilt = 0;          // its last layer's recomputed activations (checkpointing)
  };
  const Sizes& sizes(std::size_t first_block, std::size_t length) {
    const auto key = std::make_pair(first_block, length);
    auto found = cache_.find(key);
    if (found != cache_.end()) return found->second;
    std::int64_t params = 0;
    for (std::size_t b = first_block; b < first_block + length; ++b) {
      params += model_.layers[terms_.first_layer_of_block(b)].param_count();
    }
    const PlanUnit& spec = plan_.units.at(plan_.units.size() > 1 ? 1 : 0);
    const UnitLayout layout = unit_layout(spec, params, plan_.training.precision, world_, gpus_per_node_);
    Sizes sizes;
    sizes.persistent = persistent_bytes(layout);
    sizes.gathered = layout.gathers ? layout.gathered_bytes : 0;
    sizes.grad_copy = layout.grad_copies ? layout.grad_copy_bytes : 0;
    sizes.activations_through = activations_through_[terms_.first_layer_of_block(first_block + length - 1)];
    sizes.top_rebuilt = rebuilt_[terms_.first_layer_of_block(first_block + length - 1)];
    return cache_.emplace(key, sizes).first->second;
  }
  // In unit `unit`'s last forward op, with `right` (nullptr: none) prefetched; and in its first backward op, with
  // `left` (nullptr: none) prefetched: activations so far, the gathered units, its gradient.
  static std::int64_t transient(const Sizes& unit, const Sizes* left, const Sizes* right) {
    const std::int64_t forward = unit.activations_through + unit.gathered + (right != nullptr ? right->gathered : 0);
    const std::int64_t backward = unit.activations_through + unit.top_rebuilt + unit.gathered + unit.grad_copy +
                                  (left != nullptr ? left->gathered : 0);
    return std::max(forward, backward);
  }
  std::int64_t constant_bytes() const { return constant_bytes_; }

 private:
  std::int64_t persistent_bytes(const UnitLayout& layout) const {
    const auto& precision = plan_.training.precision;
    std::int64_t bytes = 0;
    if (!plan_.offload.params) {
      bytes += layout.shard_elements * precision.param_storage_bytes + layout.grad_shard_elements * precision.grad_storage_bytes;
    }
    if (!plan_.offload.params && !plan_.offload.optimizer) {
      bytes += layout.optimizer_shard_elements * optimizer_bytes_per_param(precision, plan_.training.optimizer);
    }
    return bytes;
  }

  const ModelSpec& model_;
  const Plan& plan_;
  const StepTerms& terms_;
  int world_, gpus_per_node_;
  std::vector<std::int64_t> activations_through_, rebuilt_;
  std::int64_t constant_bytes_ = 0;
  std::map<std::pair<std::size_t, std::size_t>, Sizes> cache_;
};

}  // namespace

namespace {

// What both searches share: the step terms, the time bounds, and (with a cap) the memory floor's filter.
struct WrapContext {
  WrapContext(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile, int world_size,
              int gpus_per_node, int max_unit_blocks, std::int64_t memory_cap_bytes)
      : terms(model, plan_template, profile, world_size, gpus_per_node),
        n(terms.block_count()),
        m(static_cast<std::size_t>(std::max(1, max_unit_blocks))),
        width(m + 1),
        exact([&model, &plan_template, &profile, world_size, gpus_per_node](const std::vector<LayerRange>& units) {
          return modelled_step_time_s(model, plan_template, profile, world_size, gpus_per_node, units);
        }),
        bounds(terms, n, m, exact),
        floor(model, plan_template, terms, world_size, gpus_per_node, profile.context_overhead_bytes) {
    if (memory_cap_bytes <= 0) return;
    // The least shards any wrapping holds (padding differs between wrappings): the budget every transient term of a
    // fitting wrapping stays within is the cap less this and the constant part (Note [Wrap search]).
    std::vector<std::int64_t> least(n + 1, std::numeric_limits<std::int64_t>::max());
    least[0] = 0;
    for (std::size_t p = 1; p <= n; ++p) {
      for (std::size_t c = 1; c <= m && c <= p; ++c) least[p] = std::min(least[p], least[p - c] + floor.sizes(p - c, c).persistent);
    }
    transient_budget_bytes = memory_cap_bytes - floor.constant_bytes() - least[n];
  }

  // Whether a wrapping can hold unit (p, b) with unit (p − c, c) to its left (c = 0: none) and still fit: their
  // transient terms against the budget. `last`: (p, b) is the last unit (nothing to its right).
  bool allowed(std::size_t p, std::size_t b, std::size_t c, bool last) {
    if (transient_budget_bytes == std::numeric_limits<std::int64_t>::max()) return true;  // no cap
    const auto& sizes = floor.sizes(p, b);
    if (c == 0 || last) {
      if (MemoryFloor::transient(sizes, nullptr, nullptr) > transient_budget_bytes) return false;
      if (c == 0) return true;
    }
    const auto& left = floor.sizes(p - c, c);
    return MemoryFloor::transient(sizes, &left, nullptr) <= transient_budget_bytes &&
           MemoryFloor::transient(left, nullptr, &sizes) <= transient_budget_bytes;
  }
  bool allowed_units(const std::vector<std::pair<std::size_t, std::size_t>>& blocks) {
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      const bool last = k + 1 == blocks.size();
      if (!allowed(blocks[k].first, blocks[k].second, k > 0 ? blocks[k - 1].second : 0, last)) return false;
    }
    return true;
  }

  double last_unit_cost(std::size_t b) {
    const UnitCost& last = terms.unit(n - b, b);
    return terms.turn_terms(last) + terms.forward_step(last, 0.0) + terms.optimizer_time_s(last.optimizer_elements);
  }
  // Placing (p − c, c) left of (p, b): the cost added and the backlog left for it.
  std::pair<double, double> extend(std::size_t p, std::size_t b, std::size_t c, double backlog_s) {
    const UnitCost& unit = terms.unit(p, b);
    const UnitCost& left = terms.unit(p - c, c);
    const auto step = terms.backward_step(unit, left.gather_backward_s, backlog_s);
    return {step.step_s + terms.forward_step(left, unit.gather_forward_s) + terms.optimizer_time_s(left.optimizer_elements),
            step.backlog_s};
  }
  // Closing with (0, b) as the first unit: what the head and the tail add.
  double close_cost(std::size_t b, double backlog_s) {
    const UnitCost& first = terms.unit(0, b);
    return terms.head_terms(first) + terms.close_terms(first, backlog_s);
  }

  StepTerms terms;
  std::size_t n, m, width;
  std::function<double(const std::vector<LayerRange>&)> exact;
  WrapBounds bounds;
  MemoryFloor floor;
  std::int64_t transient_budget_bytes = std::numeric_limits<std::int64_t>::max();
};

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
  if (backlog_monotone) {
    // In cost order, a label survives when its backlog is below every cheaper survivor's.
    for (const Label& label : labels) {
      if (kept.empty() || label.backlog_s < kept.back().backlog_s) kept.push_back(label);
    }
  } else {
    std::vector<double> seen;
    for (const Label& label : labels) {
      if (std::find(seen.begin(), seen.end(), label.backlog_s) != seen.end()) continue;
      seen.push_back(label.backlog_s);
      kept.push_back(label);
    }
  }
  labels = std::move(kept);
}

std::vector<std::pair<std::size_t, std::size_t>> uniform_blocks(std::size_t n, std::size_t k) {
  std::vector<std::pair<std::size_t, std::size_t>> blocks;
  for (std::size_t first = 0; first < n; first += k) blocks.emplace_back(first, std::min(k, n - first));
  return blocks;
}

// The fastest wrapping (with a cap: among those the memory floor allows), by the label DP.
WrapDpResult label_dp(WrapContext& context) {
  auto& terms = context.terms;
  const std::size_t n = context.n, m = context.m, width = context.width;
  const bool backlog_monotone = terms.slowdown() <= 2.0;
  // An upper bound of the optimum: the bounds' own wrapping, and every uniform wrapping, when the floor allows them.
  double upper_bound = kInf;
  for (std::size_t k = 1; k <= m; ++k) {
    const auto blocks = uniform_blocks(n, k);
    if (context.allowed_units(blocks)) upper_bound = std::min(upper_bound, context.exact(to_units(terms, blocks)));
  }
  if (context.transient_budget_bytes == std::numeric_limits<std::int64_t>::max()) {
    upper_bound = std::min(upper_bound, context.bounds.upper_bound());
  }
  const double prune_above = upper_bound * (1.0 + 1e-9);  // keep the optimum through rounding
  const auto promising = [&](double cost_s, std::size_t p, std::size_t b, double backlog_s) {
    return cost_s + context.bounds.lower_bound(p, b, backlog_s) <= prune_above;
  };
  std::vector<std::vector<Label>> labels((n + 1) * width);
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    const double cost = context.last_unit_cost(b);
    if (context.allowed(n - b, b, 0, true) && promising(cost, n - b, b, 0.0)) {
      labels[(n - b) * width + b].push_back({cost, 0.0, kNone, kNone});
    }
  }
  // Right to left: a state's labels are final once every state with a larger p has been expanded.
  for (std::size_t p = n; p-- > 1;) {
    for (std::size_t b = 1; b <= m && p + b <= n; ++b) {
      const std::size_t state = p * width + b;
      auto& here = labels[state];
      if (here.empty()) continue;
      keep_pareto(here, backlog_monotone);
      for (std::size_t c = 1; c <= m && c <= p; ++c) {
        if (!context.allowed(p, b, c, p + b == n)) continue;
        auto& target = labels[(p - c) * width + c];
        for (std::size_t index = 0; index < here.size(); ++index) {
          // The unit at p now has its neighbour below: its backward step is final, and so is the left unit's
          // forward step (its right neighbour is known).
          const auto [added, backlog] = context.extend(p, b, c, here[index].backlog_s);
          const double cost = here[index].cost_s + added;
          if (promising(cost, p - c, c, backlog)) target.push_back({cost, backlog, state, index});
        }
      }
    }
  }
  // Close at p = 0: the first unit's backward, the embedding, the root's reduction, the optimizer, the head.
  WrapDpResult result;
  double best_total = kInf;
  std::size_t best_state = kNone, best_label = kNone;
  for (std::size_t b = 1; b <= m && b <= n; ++b) {
    auto& here = labels[b];
    if (here.empty() || !context.allowed(0, b, 0, b == n)) continue;
    keep_pareto(here, backlog_monotone);
    for (std::size_t index = 0; index < here.size(); ++index) {
      const double total = here[index].cost_s + context.close_cost(b, here[index].backlog_s);
      if (total < best_total) {
        best_total = total;
        best_state = b;
        best_label = index;
      }
    }
  }
  if (best_state == kNone) return result;
  // Walk the parents: from the first unit rightwards.
  std::vector<std::pair<std::size_t, std::size_t>> blocks;
  std::size_t first_block = 0;
  for (std::size_t state = best_state, index = best_label; state != kNone;) {
    const std::size_t length = state % width;
    blocks.emplace_back(first_block, length);
    first_block += length;
    const Label& label = labels[state][index];
    state = label.parent_state;
    index = label.parent_label;
  }
  result.units = to_units(terms, blocks);
  result.found = true;
  result.modelled_step_s = context.exact(result.units);
  return result;
}

}  // namespace

WrapDpResult best_wrapping(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                           int world_size, int gpus_per_node, const WrapDpOptions& options) {
  WrapContext context(model, plan_template, profile, world_size, gpus_per_node, options.max_unit_blocks, 0);
  return label_dp(context);
}

bool wrap_model_is_exact(const Plan& plan_template, int world_size, int gpus_per_node) {
  if (plan_template.offload.params || plan_template.offload.optimizer) return false;  // host copies, host optimizer
  if (plan_template.training.grad_accumulation_steps(world_size) != 1) return false;  // one micro-batch
  const PlanUnit& unit = plan_template.units.at(plan_template.units.size() > 1 ? 1 : 0);
  const ShardingLayout layout = resolve_sharding(unit.strategy, world_size, gpus_per_node);
  if (layout.grads_sharded() && world_size / layout.grad_group > 1) return false;  // HSDP's second reduction stream
  return !unit.reshard_after_forward.keeps_partial_copy();
}

std::int64_t memory_floor_bytes(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                                int world_size, int gpus_per_node, const std::vector<LayerRange>& units) {
  StepTerms terms(model, plan_template, profile, world_size, gpus_per_node);
  MemoryFloor floor(model, plan_template, terms, world_size, gpus_per_node, profile.context_overhead_bytes);
  std::vector<const MemoryFloor::Sizes*> sizes;
  std::size_t block = 0;
  for (const auto& unit : units) {
    sizes.push_back(&floor.sizes(block, unit.end - unit.begin));
    block += unit.end - unit.begin;
  }
  SHARDPLAN_CHECK(!sizes.empty() && block == terms.block_count(), "units must cover every block");
  std::int64_t persistent = 0, transient = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    persistent += sizes[k]->persistent;
    transient = std::max(transient, MemoryFloor::transient(*sizes[k], k > 0 ? sizes[k - 1] : nullptr,
                                                           k + 1 < sizes.size() ? sizes[k + 1] : nullptr));
  }
  return floor.constant_bytes() + persistent + transient;
}

WrapSearchResult fastest_fitting_wrapping(const ModelSpec& model, const Plan& plan_template,
                                          const HardwareProfile& profile, int world_size, int gpus_per_node,
                                          const WrapSearchOptions& options) {
  WrapContext context(model, plan_template, profile, world_size, gpus_per_node, options.max_unit_blocks,
                      options.memory_cap_bytes);
  WrapSearchResult result;
  // First the fastest wrapping the floor allows: when the simulator agrees it fits, nothing faster can (every
  // faster wrapping's floor is over the cap), so it is the answer.
  const WrapDpResult floor_best = label_dp(context);
  if (!floor_best.found || floor_best.modelled_step_s > options.stop_above_s) {
    result.exhausted = true;
    return result;
  }
  ++result.checked;
  if (options.fits(floor_best.units)) {
    result.found = true;
    result.units = floor_best.units;
    result.modelled_step_s = floor_best.modelled_step_s;
    return result;
  }
  // Otherwise wrappings in nondecreasing time, best first over partial wrappings from the right (keyed by cost + the
  // DP's lower bound of the rest; complete ones by their exact time), each checked until one fits. Bounded: without
  // dominance this search can grow exponentially, so past kMaxNodes it gives up and the caller falls back.
  constexpr std::size_t kMaxNodes = 20'000;
  struct Node {
    double cost_s;
    double backlog_s;
    std::size_t first_block, length;  // the leftmost placed unit
    std::size_t parent;
    bool complete;
  };
  std::vector<Node> nodes;
  using Entry = std::pair<double, std::size_t>;  // (key, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  const auto push = [&](const Node& node, double key) {
    if (key > options.stop_above_s) return;  // cannot beat the incumbent
    nodes.push_back(node);
    queue.push({key, nodes.size() - 1});
  };
  const std::size_t n = context.n, m = context.m;
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    if (!context.allowed(n - b, b, 0, true)) continue;
    const double cost = context.last_unit_cost(b);
    push({cost, 0.0, n - b, b, kNone, false}, cost + context.bounds.lower_bound(n - b, b, 0.0));
  }
  while (!queue.empty()) {
    if (nodes.size() > kMaxNodes) {
      result.gave_up = true;
      return result;
    }
    const std::size_t index = queue.top().second;
    queue.pop();
    const Node node = nodes[index];
    if (node.complete) {
      std::vector<std::pair<std::size_t, std::size_t>> blocks;
      for (std::size_t at = index; at != kNone; at = nodes[at].parent) blocks.emplace_back(nodes[at].first_block, nodes[at].length);
      const std::vector<LayerRange> units = to_units(context.terms, blocks);
      if (units == floor_best.units) continue;  // checked above
      ++result.checked;
      if (options.fits(units)) {
        result.found = true;
        result.units = units;
        result.modelled_step_s = node.cost_s;
        return result;
      }
      if (result.checked >= options.max_checks) {
        result.gave_up = true;
        return result;
      }
      continue;
    }
    if (node.first_block == 0) {
      // Close: the node becomes a complete wrapping with its exact time; it stands for the first unit itself, so
      // its parent is the node's parent.
      if (!context.allowed(0, node.length, 0, node.parent == kNone)) continue;
      Node done = node;
      done.cost_s = node.cost_s + context.close_cost(node.length, node.backlog_s);
      done.complete = true;
      push(done, done.cost_s);
      continue;
    }
    for (std::size_t c = 1; c <= m && c <= node.first_block; ++c) {
      if (!context.allowed(node.first_block, node.length, c, node.parent == kNone)) continue;
      const std::size_t p = node.first_block - c;
      const auto [added, backlog] = context.extend(node.first_block, node.length, c, node.backlog_s);
      const Node next{node.cost_s + added, backlog, p, c, index, false};
      push(next, next.cost_s + context.bounds.lower_bound(p, c, backlog));
    }
  }
  result.exhausted = true;  // no other wrapping fits, or none can beat stop_above_s
  return result;
}

}  // namespace shardplan
