// The wrap-boundary DP (Note [Wrap DP] in wrap_dp.h) and the fastest fitting wrapping (Note [Wrap search]).
#include "wrap_dp.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
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
  double turn_terms(const UnitCost& last, bool last_kept = false) const {
    const double gather = last_kept ? 0.0 : last.gather_backward_s;
    return run(root_head_.forward_ops, 0.0) + std::max(run(root_head_.backward_ops, gather), gather);
  }
  // Whether keeping a unit gathered from forward to backward changes anything: its backward all-gather exists.
  bool reshard_choice() const {
    return layout_.params_sharded() && reshard_.enabled && !reshard_.keeps_partial_copy();
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

Plan plan_with_units(const ModelSpec& model, const Plan& plan_template, const std::vector<LayerRange>& units,
                     const std::vector<bool>& kept_gathered) {
  SHARDPLAN_CHECK(kept_gathered.empty() || kept_gathered.size() == units.size(), "one kept flag per unit");
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
      if (!kept_gathered.empty() && kept_gathered[static_cast<std::size_t>(id - 1)]) {
        unit.reshard_after_forward.enabled = false;
      }
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
                            int world_size, int gpus_per_node, const std::vector<LayerRange>& units,
                            const std::vector<bool>& kept_gathered) {
  StepTerms terms(model, plan_template, profile, world_size, gpus_per_node);
  SHARDPLAN_CHECK(kept_gathered.empty() || kept_gathered.size() == units.size(), "one kept flag per unit");
  const auto kept = [&](std::size_t k) { return !kept_gathered.empty() && kept_gathered[k]; };
  std::vector<const UnitCost*> costs;
  std::size_t block = 0;
  for (const auto& range : units) {
    costs.push_back(&terms.unit(block, range.end - range.begin));
    block += range.end - range.begin;
  }
  SHARDPLAN_CHECK(!costs.empty() && block == terms.block_count(), "units must cover every block");
  const std::size_t count = costs.size();
  double total = terms.head_terms(*costs.front()) + terms.turn_terms(*costs.back(), kept(count - 1));
  for (std::size_t k = 0; k < count; ++k) {
    total += terms.forward_step(*costs[k], k + 1 < count ? costs[k + 1]->gather_forward_s : 0.0) +
             terms.optimizer_time_s(costs[k]->optimizer_elements);
  }
  double backlog = 0;
  for (std::size_t k = count; k-- > 1;) {
    const auto step = terms.backward_step(*costs[k], kept(k - 1) ? 0.0 : costs[k - 1]->gather_backward_s, backlog);
    total += step.step_s;
    backlog = step.backlog_s;
  }
  return total + terms.close_terms(*costs.front(), backlog);
}

namespace {

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
  // In a unit's last forward op: activations so far, it and the next unit (`right`, nullptr: none) gathered.
  static std::int64_t forward_term(const Sizes& unit, const Sizes* right) {
    return unit.activations_through + unit.gathered + (right != nullptr ? right->gathered : 0);
  }
  // In its first backward op: activations so far with its top layer's recompute, it gathered, its gradient, and the
  // unit below (`left`, nullptr: none) being gathered when that one reshards after forward.
  static std::int64_t backward_term(const Sizes& unit, const Sizes* left, bool left_kept) {
    return unit.activations_through + unit.top_rebuilt + unit.gathered + unit.grad_copy +
           (left != nullptr && !left_kept ? left->gathered : 0);
  }
  // Units kept gathered from forward to backward hold their parameters through both terms of every unit above them
  // (added by the callers: Note [Wrap search]).
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

// A wrapping as (first block, length, kept gathered) per unit, left to right.
struct UnitChoice {
  std::size_t first_block;
  std::size_t length;
  bool kept;
};

std::vector<LayerRange> to_units(const StepTerms& terms, const std::vector<UnitChoice>& choices) {
  std::vector<LayerRange> units;
  for (const auto& choice : choices) {
    units.push_back({terms.first_layer_of_block(choice.first_block),
                     terms.first_layer_of_block(choice.first_block) + choice.length});
  }
  return units;
}
std::vector<bool> to_kept(const std::vector<UnitChoice>& choices) {
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
    if (memory_cap_bytes <= 0) return;
    // The least shards any wrapping holds (padding differs between wrappings): the budget is the cap less this and
    // the constant part.
    std::vector<std::int64_t> least(n + 1, std::numeric_limits<std::int64_t>::max());
    least[0] = 0;
    for (std::size_t p = 1; p <= n; ++p) {
      for (std::size_t c = 1; c <= m && c <= p; ++c) least[p] = std::min(least[p], least[p - c] + floor.sizes(p - c, c).persistent);
    }
    budget_bytes = memory_cap_bytes - floor.constant_bytes() - least[n];
  }

  // The kept flags a unit may take. Units kept gathered form a suffix of the model (the last units, whose backward
  // comes first — what FSDP2 users keep, and what bounds the search: any subset explodes the labels), so a unit may
  // be kept only when the unit after it is.
  std::vector<bool> kept_options() const {
    if (keep_choice) return {false, true};
    return {template_kept};
  }
  bool may_follow(bool right_kept, bool left_kept) const { return !keep_choice || right_kept || !left_kept; }
  std::size_t state(std::size_t p, std::size_t b, bool kept) const { return (p * (m + 1) + b) * 2 + (kept ? 1 : 0); }

  double gather_backward(std::size_t p, std::size_t b, bool kept) {
    return kept ? 0.0 : terms.unit(p, b).gather_backward_s;
  }
  // Note [Wrap search]: `slack` is the least, over the memory terms known so far, of the budget less the term less
  // the parameters of the units kept gathered below it that are placed; placing a unit kept gathered lowers it for
  // every unit above. A wrapping fits the floor only if its slack never goes below 0.
  std::int64_t last_unit_slack(std::size_t b) {
    return budget_bytes - MemoryFloor::forward_term(floor.sizes(n - b, b), nullptr);
  }
  std::int64_t extend_slack(std::int64_t slack, std::size_t p, std::size_t b, std::size_t c, bool left_kept) {
    const auto& sizes = floor.sizes(p, b);
    const auto& left = floor.sizes(p - c, c);
    std::int64_t above = std::min(slack, budget_bytes - MemoryFloor::backward_term(sizes, &left, left_kept));
    if (left_kept) above -= left.gathered;
    return std::min(above, budget_bytes - MemoryFloor::forward_term(left, &sizes));
  }
  std::int64_t close_slack(std::int64_t slack, std::size_t b) {
    return std::min(slack, budget_bytes - MemoryFloor::backward_term(floor.sizes(0, b), nullptr, false));
  }

  double last_unit_cost(std::size_t b, bool kept) {
    const UnitCost& last = terms.unit(n - b, b);
    return terms.turn_terms(last, kept) + terms.forward_step(last, 0.0) + terms.optimizer_time_s(last.optimizer_elements);
  }
  // Placing (p − c, c, left_kept) left of (p, b): the cost added and the backlog left for it.
  std::pair<double, double> extend(std::size_t p, std::size_t b, std::size_t c, bool left_kept, double backlog_s) {
    const UnitCost& unit = terms.unit(p, b);
    const UnitCost& left = terms.unit(p - c, c);
    const auto step = terms.backward_step(unit, left_kept ? 0.0 : left.gather_backward_s, backlog_s);
    return {step.step_s + terms.forward_step(left, unit.gather_forward_s) + terms.optimizer_time_s(left.optimizer_elements),
            step.backlog_s};
  }
  // Closing with (0, b) as the first unit: what the head and the tail add.
  double close_cost(std::size_t b, double backlog_s) {
    const UnitCost& first = terms.unit(0, b);
    return terms.head_terms(first) + terms.close_terms(first, backlog_s);
  }
  // The slack of a complete wrapping (Note [Wrap search]).
  std::int64_t wrapping_slack(const std::vector<UnitChoice>& choices) {
    const std::size_t last = choices.size() - 1;
    std::int64_t slack = last_unit_slack(choices[last].length);
    for (std::size_t k = last; k > 0; --k) {
      slack = extend_slack(slack, choices[k].first_block, choices[k].length, choices[k - 1].length, choices[k - 1].kept);
    }
    return close_slack(slack, choices[0].length);
  }

  StepTerms terms;
  std::size_t n, m;
  bool keep_choice;    // each unit chooses reshard_after_forward (Note [Wrap search])
  bool template_kept;  // otherwise every unit is as the template says
  std::function<double(const std::vector<LayerRange>&, const std::vector<bool>&)> exact;
  WrapBounds bounds;
  MemoryFloor floor;
  std::int64_t budget_bytes = std::numeric_limits<std::int64_t>::max() / 4;  // no cap: never binding
};

// A partial wrapping from the right end (Note [Wrap DP]): everything right of the leftmost placed unit is final.
struct Label {
  double cost_s;       // every term that no longer depends on units further left
  double backlog_s;    // reductions queued when the leftmost placed unit's backward starts
  std::int64_t slack;  // Note [Wrap search]
  std::size_t parent_state;
  std::size_t parent_label;
};

// Drops labels another label dominates (no more cost, no more backlog, no less slack). Sound when the rest of the
// step never gets shorter as the backlog grows, which holds for a slowdown of at most 2 (Note [Wrap DP]); above that
// only exact backlog ties are merged. Slack only ever decreases along a wrapping.
void keep_pareto(std::vector<Label>& labels, bool backlog_monotone, bool with_slack) {
  std::sort(labels.begin(), labels.end(), [](const Label& a, const Label& b) {
    return a.cost_s != b.cost_s ? a.cost_s < b.cost_s : a.backlog_s < b.backlog_s;
  });
  std::vector<Label> kept;
  if (backlog_monotone && !with_slack) {
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

struct DpAnswer {
  std::vector<UnitChoice> choices;
  double modelled_step_s = 0;
  bool found = false;
  bool overflow = false;  // a state's labels outgrew kMaxLabelsPerState: no answer
};

// With per-unit reshard and a memory floor, labels differ in three ways (cost, backlog, slack) and a state can hold
// very many; past this the DP stops and the caller searches without the per-unit choice.
constexpr std::size_t kMaxLabelsPerState = 128;

// The fastest wrapping (with a cap: among those the memory floor allows), by the label DP.
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
      const std::int64_t slack = context.last_unit_slack(b);
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
          for (bool left_kept : kept_options) {
            if (!context.may_follow(kept, left_kept)) continue;
            auto& target = labels[context.state(p - c, c, left_kept)];
            for (std::size_t index = 0; index < here.size(); ++index) {
              // The unit at p now has its neighbour below: its backward step is final, and so is the left unit's
              // forward step (its right neighbour is known).
              const auto [added, backlog] = context.extend(p, b, c, left_kept, here[index].backlog_s);
              const double cost = here[index].cost_s + added;
              const std::int64_t slack = context.extend_slack(here[index].slack, p, b, c, left_kept);
              if (promising(cost, p - c, c, backlog, slack)) target.push_back({cost, backlog, slack, state, index});
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
      for (std::size_t index = 0; index < here.size(); ++index) {
        if (with_floor && context.close_slack(here[index].slack, b) < 0) continue;
        const double total = here[index].cost_s + context.close_cost(b, here[index].backlog_s);
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

}  // namespace

WrapDpResult best_wrapping(const ModelSpec& model, const Plan& plan_template, const HardwareProfile& profile,
                           int world_size, int gpus_per_node, const WrapDpOptions& options) {
  WrapContext context(model, plan_template, profile, world_size, gpus_per_node, options.max_unit_blocks, 0, false);
  const DpAnswer answer = label_dp(context, false);
  WrapDpResult result;
  result.found = answer.found;
  result.units = to_units(context.terms, answer.choices);
  result.modelled_step_s = answer.modelled_step_s;
  return result;
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
                                int world_size, int gpus_per_node, const std::vector<LayerRange>& units,
                                const std::vector<bool>& kept_gathered) {
  WrapContext context(model, plan_template, profile, world_size, gpus_per_node, 1, 0, false);
  std::vector<UnitChoice> choices;
  std::size_t block = 0;
  const bool template_kept = context.template_kept;
  for (std::size_t k = 0; k < units.size(); ++k) {
    const std::size_t length = units[k].end - units[k].begin;
    choices.push_back({block, length, kept_gathered.empty() ? template_kept : static_cast<bool>(kept_gathered[k])});
    block += length;
  }
  SHARDPLAN_CHECK(!choices.empty() && block == context.n, "units must cover every block");
  std::int64_t persistent = 0;
  for (const auto& choice : choices) persistent += context.floor.sizes(choice.first_block, choice.length).persistent;
  // With no cap the budget is a large constant B: the slack is B less the largest term.
  return context.floor.constant_bytes() + persistent + (context.budget_bytes - context.wrapping_slack(choices));
}

WrapSearchResult fastest_fitting_wrapping(const ModelSpec& model, const Plan& plan_template,
                                          const HardwareProfile& profile, int world_size, int gpus_per_node,
                                          const WrapSearchOptions& options) {
  WrapContext with_choice(model, plan_template, profile, world_size, gpus_per_node, options.max_unit_blocks,
                          options.memory_cap_bytes, options.per_unit_reshard);
  DpAnswer floor_best = label_dp(with_choice, true);
  std::optional<WrapContext> without_choice;
  if (floor_best.overflow) {
    without_choice.emplace(model, plan_template, profile, world_size, gpus_per_node, options.max_unit_blocks,
                           options.memory_cap_bytes, false);
    floor_best = label_dp(*without_choice, true);
  }
  WrapContext& context = without_choice ? *without_choice : with_choice;
  WrapSearchResult result;
  result.per_unit_reshard = context.keep_choice;
  result.reshard_choice_dropped = with_choice.keep_choice && !context.keep_choice;
  const auto answer = [&](const std::vector<UnitChoice>& choices, double modelled_s) {
    result.found = true;
    result.units = to_units(context.terms, choices);
    result.kept_gathered = to_kept(choices);
    result.modelled_step_s = modelled_s;
    return result;
  };
  // First the fastest wrapping the floor allows: when the simulator agrees it fits, nothing faster can (every
  // faster wrapping's floor is over the cap), so it is the answer.
  if (!floor_best.found || floor_best.modelled_step_s > options.stop_above_s) {
    result.exhausted = true;
    return result;
  }
  ++result.checked;
  if (options.fits(to_units(context.terms, floor_best.choices), to_kept(floor_best.choices))) {
    return answer(floor_best.choices, floor_best.modelled_step_s);
  }
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
  };
  std::vector<Node> nodes;
  using Entry = std::pair<double, std::size_t>;  // (key, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  const auto push = [&](const Node& node, double key) {
    if (key > options.stop_above_s) return;  // cannot beat the incumbent
    if (node.slack < 0) {
      ++result.pruned_by_memory;
      return;
    }
    nodes.push_back(node);
    queue.push({key, nodes.size() - 1});
  };
  const std::size_t n = context.n, m = context.m;
  const std::vector<bool> kept_options = context.kept_options();
  for (std::size_t b = 1; b <= std::min(m, n); ++b) {
    for (bool kept : kept_options) {
      const double cost = context.last_unit_cost(b, kept);
      push({cost, 0.0, context.last_unit_slack(b), {n - b, b, kept}, kNone, false},
           cost + context.bounds.lower_bound(n - b, b, 0.0));
    }
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
      std::vector<UnitChoice> choices;
      for (std::size_t at = index; at != kNone; at = nodes[at].parent) choices.push_back(nodes[at].leftmost);
      if (std::equal(choices.begin(), choices.end(), floor_best.choices.begin(), floor_best.choices.end(),
                     [](const UnitChoice& a, const UnitChoice& b) {
                       return a.first_block == b.first_block && a.length == b.length && a.kept == b.kept;
                     })) {
        continue;  // checked above
      }
      ++result.checked;
      if (options.fits(to_units(context.terms, choices), to_kept(choices))) return answer(choices, node.cost_s);
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
      done.cost_s = node.cost_s + context.close_cost(unit.length, node.backlog_s);
      done.slack = context.close_slack(node.slack, unit.length);
      done.complete = true;
      push(done, done.cost_s);
      continue;
    }
    for (std::size_t c = 1; c <= m && c <= unit.first_block; ++c) {
      for (bool left_kept : kept_options) {
        if (!context.may_follow(unit.kept, left_kept)) continue;
        const std::size_t p = unit.first_block - c;
        const auto [added, backlog] = context.extend(unit.first_block, unit.length, c, left_kept, node.backlog_s);
        const Node next{node.cost_s + added, backlog,
                        context.extend_slack(node.slack, unit.first_block, unit.length, c, left_kept),
                        {p, c, left_kept}, index, false};
        push(next, next.cost_s + context.bounds.lower_bound(p, c, backlog));
      }
    }
  }
  result.exhausted = true;  // no other wrapping fits, or none can beat stop_above_s
  return result;
}

}  // namespace shardplan
