// The memory floor of the wrap search (Note [Wrap search] in wrap_dp.h): sound lower bounds of the simulated peak,
// per unit and per pair of neighbouring units. Internal to planner/.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "model_spec.h"
#include "plan.h"
#include "unit_layout.h"
#include "wrap_step_terms.h"

namespace shardplan::wrap_internal {

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
    root_grad_copy_ = root.grad_copies ? root.grad_copy_bytes : 0;
    // no_sync accumulation: every unit's full-size gradient, allocated by its first backward, lives until its
    // reduction in the last micro-batch (lowering.cpp, backward_pass). Unpadded, so no wrapping holds less.
    accumulates_ = plan.grad_accumulation_steps > 1 && training.no_sync_accumulation;
    block_grads_before_.push_back(0);
    const PlanUnit& spec = plan.units.at(plan.units.size() > 1 ? 1 : 0);
    for (std::size_t b = 0; b < terms.block_count(); ++b) {
      const std::int64_t params = model.layers[terms.first_layer_of_block(b)].param_count();
      const bool copies = unit_layout(spec, params, training.precision, world, gpus_per_node).grad_copies;
      block_grads_before_.push_back(block_grads_before_.back() +
                                    (accumulates_ && copies ? params * training.precision.grad_compute_bytes : 0));
    }
  }

  struct Sizes {
    std::int64_t persistent = 0;  // its shards: params, grads, optimizer states
    std::int64_t gathered = 0;    // its gathered parameters while in use
    std::int64_t grad_copy = 0;   // its full-size gradient during backward
    std::int64_t held_grad = 0;   // what its reduce-scatter keeps until the next one starts (its full-size gradient)
    std::int64_t activations_through = 0;  // every layer's kept activations up to its last layer
    std::int64_t top_rebuilt = 0;          // its last layer's recomputed activations (checkpointing)
    // no_sync accumulation, in the last micro-batch: the gradients every unit holds in forward, and those the units
    // below it and the root hold in its backward.
    std::int64_t accumulated_all = 0;
    std::int64_t accumulated_below = 0;
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
    // Note [Reduction buffers] (schedule.h): a reduce-scatter's input lives until the next reduce-scatter starts, after
    // the unit below's backward; an all-reduce of replicated gradients frees its input when it ends.
    sizes.held_grad = layout.grad_group > 1 ? sizes.grad_copy : 0;
    sizes.activations_through = activations_through_[terms_.first_layer_of_block(first_block + length - 1)];
    sizes.top_rebuilt = rebuilt_[terms_.first_layer_of_block(first_block + length - 1)];
    if (accumulates_) {
      sizes.accumulated_all = block_grads_before_.back() + root_grad_copy_;
      sizes.accumulated_below = block_grads_before_[first_block] + root_grad_copy_;
    }
    return cache_.emplace(key, sizes).first->second;
  }
  // In a unit's last forward op: activations so far, it and the next unit (`right`, nullptr: none) gathered.
  static std::int64_t forward_term(const Sizes& unit, const Sizes* right) {
    return unit.activations_through + unit.gathered + (right != nullptr ? right->gathered : 0) + unit.accumulated_all;
  }
  // In its first backward op: activations so far with its top layer's recompute, it gathered, its gradient, the
  // unit below (`left`, nullptr: none) being gathered when that one reshards after forward, and `held_above_bytes`:
  // the reduce-scatter inputs of units above still alive (Note [Reduction buffers] in schedule.h; 0 where unknown).
  static std::int64_t backward_term(const Sizes& unit, const Sizes* left, bool left_kept,
                                    std::int64_t held_above_bytes = 0) {
    return unit.activations_through + unit.top_rebuilt + unit.gathered + unit.grad_copy +
           (left != nullptr && !left_kept ? left->gathered : 0) + held_above_bytes + unit.accumulated_below;
  }
  // At the turn, in the head's first backward op (the last layer's): every layer's kept activations, the root's
  // full-size gradient (reduced only after the embedding's backward), and the last unit's parameters when it stays
  // gathered from forward (when it does not, its backward all-gather may still wait for the rate limiter).
  std::int64_t turn_term(const Sizes& last, bool last_kept) const {
    return activations_through_.back() + root_grad_copy_ + (last_kept ? last.gathered : 0) +
           (accumulates_ ? block_grads_before_.back() : 0);
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
  std::int64_t root_grad_copy_ = 0;
  bool accumulates_ = false;
  std::vector<std::int64_t> block_grads_before_;  // no_sync accumulation: the blocks' gradients below each block
  std::map<std::pair<std::size_t, std::size_t>, Sizes> cache_;
};


}  // namespace shardplan::wrap_internal
