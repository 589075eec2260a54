// The wrap searches' step model (Note [Wrap DP] in wrap_dp.h): per-unit op durations and collective times, and the
// recurrence terms (forward step, backward step with the reduction backlog, head, turn, close). Internal to planner/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "collective_cost.h"
#include "compute_cost.h"
#include "errors.h"
#include "hardware_profile.h"
#include "model_spec.h"
#include "plan.h"
#include "sharding.h"

namespace shardplan::wrap_internal {

struct UnitCost {
  std::vector<double> forward_ops;   // base durations, in issue order
  std::vector<double> backward_ops;  // recompute + backward per layer, layers descending
  // The same in a micro-batch whose gradient buffer is fresh: its first backward op zero-fills it first
  // (Op::zeroed_bytes, Note [Lowering]).
  std::vector<double> backward_ops_filled;
  double gather_forward_s = 0;       // its all-gather before forward (0 when parameters are not sharded)
  double gather_backward_s = 0;      // its all-gather before backward (0 when kept gathered from forward)
  double reduce_s = 0;               // its gradient reduction (reduce-scatter, or all-reduce when replicated)
  double replica_reduce_s = 0;       // HSDP: the all-reduce across replicas after the reduce-scatter
  bool reduces = false;              // its reduction op exists (the host pays the issue overhead for it)
  std::int64_t optimizer_elements = 0;
};

inline std::int64_t round_up(std::int64_t count, int group) {
  const std::int64_t g = std::max(group, 1);
  return (count + g - 1) / g * g;
}

// The simulator's timing of compute ops that run back to back from time 0 while communication streams are busy
// from time 0 for `window_s` (the longest of them: every window in the step model starts where its ops start, see
// Note [Wrap DP]): each op's base interval overlaps the window, the overlapped part is stretched by the slowdown, and
// every op that does work pays the host's dispatch overhead after it (as simulate() does).
inline double run_ops(const std::vector<double>& ops, double window_s, double slowdown, double dispatch_s) {
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
    micro_batches_ = std::max(plan.grad_accumulation_steps, 1);
    // Micro-batches that start with a fresh gradient buffer: all of them when each reduces, the first under no_sync.
    fresh_micro_batches_ = plan.training.no_sync_accumulation ? 1 : micro_batches_;
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
    // Units reduce at least one block's gradient (reduce_s grows with the bytes).
    least_reduce_s_ = std::numeric_limits<double>::infinity();
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      least_reduce_s_ = std::min(least_reduce_s_, this->unit(b, 1).reduce_s);
    }
    root_ = cost_of(root_layers, true);
    root_head_ = cost_of(after, true);
    root_embed_ = cost_of(before, true);
    // The root's gradient buffer is filled by its first backward op: the head's when it has one.
    UnitCost& first_root_backward = root_head_.backward_ops.empty() ? root_embed_ : root_head_;
    if (!first_root_backward.backward_ops.empty()) {
      first_root_backward.backward_ops_filled.front() += gradient_fill_s(root_layers);
    }
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

  // s_f(k+1) − s_f(k) = max(E_f(k | G(k+1)), G(k+1)) + o·[unit k+1 prefetches the unit after it] (Note [Wrap DP]),
  // once per micro-batch (Note [Wrap DP], accumulation: every micro-batch's forward is the same).
  double forward_step(const UnitCost& unit, double next_gather_s, bool next_prefetches = false) const {
    return micro_batches_ * (std::max(run(unit.forward_ops, next_gather_s), next_gather_s) + issue_s(next_prefetches));
  }
  // HardwareProfile::collective_issue_overhead_s when the host issues a collective there, else 0.
  double issue_s(bool issued) const { return issued ? profile_.collective_issue_overhead_s : 0.0; }

  // One unit's backward (Note [Wrap DP]), from the end of its wait: the host issues the all-gather of the unit below
  // (`next_gather_s`, 0 when there is none), then its ops start together with that gather while the gradient
  // reductions queued at the wait (`backlog_s`) drain; when they end the host issues its reduction.
  struct BackwardStep {
    double step_s = 0;     // from its wait's end to the unit below's
    double backlog_s = 0;  // reductions still queued when the unit below's wait ends (its own included)
    double ops_end_s = 0;  // when its ops end, from its wait's end
    double replica_backlog_s = 0;  // HSDP: when the all-reduces across replicas end, from the unit below's wait end
  };
  // With gradient accumulation the step also holds the earlier micro-batches' backward of the unit, which reduce
  // nothing (Note [Wrap DP], accumulation); the backlog and `ops_end_s` are the last micro-batch's.
  // HSDP (Note [Wrap DP], HSDP): `replica_backlog_s` is when the all-reduce stream's queued work ends.
  BackwardStep backward_step(const UnitCost& unit, double next_gather_s, double backlog_s,
                             double replica_backlog_s = 0) const {
    const double prefetch_s = issue_s(next_gather_s > 0);
    const double queued = std::max(0.0, backlog_s - prefetch_s);
    const double compute = run(last_ops(unit), std::max(next_gather_s, queued));
    const double issued = compute + issue_s(unit.reduces);
    // HSDP: the host issues the all-reduce across replicas right after the reduce-scatter.
    const double host_s = issued + issue_s(unit.replica_reduce_s > 0);
    const double after_ops = std::max(host_s, next_gather_s);
    // Its reduction starts when issued and the queue ahead of it has drained; the all-reduce across replicas when
    // that has ended, it is issued, and its own stream is free.
    const double reduced = std::max(issued, queued) + unit.reduce_s;
    double replicated = std::max(0.0, replica_backlog_s - prefetch_s);
    if (unit.replica_reduce_s > 0) replicated = std::max({reduced, host_s, replicated}) + unit.replica_reduce_s;
    const double backlog = std::max(0.0, reduced - after_ops);
    double replica_backlog = std::max(0.0, replicated - after_ops);
    // The next all-reduce starts after the next reduce-scatter ends, at least backlog + the least reduce-scatter
    // from here: a replica backlog no later than that changes nothing, and 0 stands for all of them (so labels that
    // differ only there merge, Note [Wrap DP]).
    if (replica_backlog <= backlog + least_reduce_s_) replica_backlog = 0;
    const double earlier = earlier_micro_batches(unit, [&](const std::vector<double>& ops) {
      // The same step in a micro-batch that reduces nothing: no backlog, nothing issued after the ops.
      return issue_s(next_gather_s > 0) + std::max(run(ops, next_gather_s), next_gather_s);
    });
    return {prefetch_s + after_ops + earlier, backlog, prefetch_s + compute, replica_backlog};
  }

  // From the step's start to the first unit's forward: the root's all-gather (issued, waited for), the first unit's
  // issued, then the embedding overlapping it; `first_prefetches`: the first unit issues the next unit's gather.
  // Once per micro-batch: the root is resharded after each backward.
  double head_terms(const UnitCost& first, bool first_prefetches = false) const {
    return micro_batches_ * (issue_s(root_.gather_forward_s > 0) + root_.gather_forward_s +
                             issue_s(first.gather_forward_s > 0)) +
           forward_step(root_embed_, first.gather_forward_s, first_prefetches);
  }
  // From the last unit's forward end to the end of its backward wait: final norm and head forward, the last unit's
  // backward all-gather issued, then the head's backward overlapping it.
  double turn_terms(const UnitCost& last, bool last_kept = false) const {
    const double gather = last_kept ? 0.0 : last.gather_backward_s;
    const auto turn = [&](const std::vector<double>& head_backward_ops) {
      return run(root_head_.forward_ops, 0.0) + issue_s(gather > 0) + std::max(run(head_backward_ops, gather), gather);
    };
    return turn(last_ops(root_head_)) + earlier_micro_batches(root_head_, turn);
  }
  // Whether keeping a unit gathered from forward to backward changes anything: its backward all-gather exists.
  bool reshard_choice() const {
    return layout_.params_sharded() && reshard_.enabled && !reshard_.keeps_partial_copy();
  }
  // From the first unit's backward start to the step's end: its backward with `backlog_s` of reductions queued,
  // the embedding's backward overlapping what is still queued, the root's reduction once both are done, then the
  // optimizer step (one op; the units' shares are added by the callers: its time streams bytes, so it is additive).
  // Earlier micro-batches end with the embedding's backward (the next one starts with the root's all-gather).
  double close_terms(const UnitCost& first, double backlog_s, double replica_backlog_s = 0) const {
    const BackwardStep last = backward_step(first, 0.0, backlog_s, replica_backlog_s);
    const double embed = run(last_ops(root_embed_), last.backlog_s);
    const double issued = embed + issue_s(root_.reduces);
    const double reduced = std::max(issued, last.backlog_s) + root_.reduce_s;
    // HSDP: the root's all-reduce across replicas follows its reduce-scatter and the units' all-reduces; the
    // optimizer waits for every reduction.
    const double replicated =
        root_.replica_reduce_s > 0
            ? std::max({reduced, issued + issue_s(true), last.replica_backlog_s}) + root_.replica_reduce_s
            : std::max(reduced, last.replica_backlog_s);
    return last.step_s + replicated + optimizer_time_s(root_.optimizer_elements) + profile_.op_dispatch_overhead_s +
           earlier_micro_batches(root_embed_, [&](const std::vector<double>& ops) { return run(ops, 0.0); });
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
  // The last micro-batch's backward ops: with the gradient fill when its buffer is fresh.
  const std::vector<double>& last_ops(const UnitCost& unit) const {
    return fresh_micro_batches_ == micro_batches_ ? unit.backward_ops_filled : unit.backward_ops;
  }
  // `term` summed over the micro-batches before the last (Note [Wrap DP], accumulation): those with a fresh gradient
  // buffer run the filled ops, the others the plain ones.
  template <class Term>
  double earlier_micro_batches(const UnitCost& unit, const Term& term) const {
    if (micro_batches_ == 1) return 0.0;
    const int fresh = fresh_micro_batches_ - (fresh_micro_batches_ == micro_batches_ ? 1 : 0);
    const int plain = micro_batches_ - 1 - fresh;
    return (fresh > 0 ? fresh * term(unit.backward_ops_filled) : 0.0) +
           (plain > 0 ? plain * term(unit.backward_ops) : 0.0);
  }
  // Zero-filling the full-size gradient of a unit of these layers (unit_layout.cpp: a copy exists when gradients
  // are sharded or reduced in another dtype; padded to the gradient group).
  double gradient_fill_s(const std::vector<std::size_t>& layers) const {
    std::int64_t params = 0;
    for (auto layer : layers) params += model_.layers[layer].param_count();
    const auto& precision = plan_.training.precision;
    const bool copies =
        params > 0 && (layout_.grads_sharded() || precision.grad_compute_bytes != precision.grad_storage_bytes);
    return copies ? buffer_fill_time_s(round_up(params, layout_.grad_group) * precision.grad_compute_bytes, profile_)
                  : 0.0;
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
    constexpr std::size_t kNoOp = static_cast<std::size_t>(-1);
    std::size_t first_backward = kNoOp;  // the index of the top layer's backward op (after its recompute)
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
      if (first_backward == kNoOp) first_backward = cost.backward_ops.size();
      cost.backward_ops.push_back(compute_time_s(layer_work(spec, training, ComputePass::backward), compute_bytes,
                                                 profile_));
    }
    // The unit's first backward op zero-fills its gradient buffer (the root's is added by the constructor).
    cost.backward_ops_filled = cost.backward_ops;
    if (!is_root && first_backward != kNoOp) cost.backward_ops_filled[first_backward] += gradient_fill_s(layers);
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
    // The lowering's reduction op (lowering.cpp, reduce): a reduce-scatter over the shard group, else an all-reduce
    // over the world when there is more than one rank.
    cost.reduces = layout_.grads_sharded() || world_ > 1;
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
  int micro_batches_ = 1;  // gradient accumulation steps (Note [Wrap DP], accumulation)
  int fresh_micro_batches_ = 1;  // of them, those whose gradient buffers are allocated (and filled) anew
  double least_reduce_s_ = 0;  // the least reduction of any unit (one block's)
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


}  // namespace shardplan::wrap_internal
