// FlatParam: one FSDP unit's flat parameter on one rank — its layout, its sharded state and its gathered buffers.
#pragma once

#include <cstdint>
#include <span>

#include "param_init.h"
#include "param_layout.h"
#include "tracking_allocator.h"
#include "unit_layout.h"

namespace shardplan::runner {

// The free functions behind FlatParam, shared with the GPU executor's DeviceFlatParam (executor/gpu/runner):
// this rank's shard [first, first + shard.size()) of a unit's flat parameter, initialised exactly as the unsharded
// reference (Note [Sharded init]); zeros in the padding.
void init_unit_shard(const runtime::ModelLayout& model, const runtime::UnitParamLayout& unit,
                     const runtime::InitOptions& init, std::int64_t first, std::span<float> shard);
// The range [first, first + shard.size()) of a unit's flat parameter copied from a model's flat parameter
// `model_flat` (zeros in the padding); FlatParam::load_shard copies a shard's ranges with it.
void copy_unit_shard_from_model(const runtime::ModelLayout& model, const runtime::UnitParamLayout& unit,
                                std::span<const float> model_flat, std::int64_t first, std::span<float> shard);
// A whole unit's flat parameter (`unit_flat`, padding allowed after it) copied into `model_flat` at its model offsets.
void scatter_unit_into_model(const runtime::ModelLayout& model, const runtime::UnitParamLayout& unit,
                             std::span<const float> unit_flat, std::span<float> model_flat);
// Note [Frozen shards]: an all-gather of `group` shards of [trainable part (trainable_shard) | frozen part
// (frozen_shard)] leaves them rank after rank, [A₀ F₀ A₁ F₁ …]; this reorders `gathered` in place into the unit's
// order [A₀ A₁ … | F₀ F₁ …] (std::rotate, no second buffer: the gathered copy is the only one the schedule counts).
// Nothing to do when either part is empty (full training, a fully frozen unit) or the group is 1.
void gathered_to_unit_order(std::span<float> gathered, std::int64_t trainable_shard, std::int64_t frozen_shard,
                            int group);

// Note [FlatParam layout]: as FSDP1's FlatParameter (torch/distributed/fsdp/_flat_param.py), a unit's layers'
// parameters are concatenated in the unit's layer order (runtime::unit_param_layout) and right-padded with zeros to
// a multiple of the shard group (UnitLayout::padded_elements, the same numbers lowering and the memory model use);
// the rank with index i in the shard group owns elements [i·shard, (i+1)·shard). Gradients, AdamW's m and v use the
// same sharding, so the optimizer steps on aligned shards (the runner only runs strategies whose parameter, gradient
// and optimizer groups coincide).
//
// Note [Frozen shards]: with frozen tensors (fine-tuning) the unit's buffer is Note [Trainable-first unit layout]'s
// (param_layout.h): a trainable region of UnitLayout::grad_padded_elements (the gradient's, 0 for a unit that trains
// nothing) and the frozen region after it, each padded to the shard group as FSDP2 pads each dtype group (Note
// [Frozen parameters in FSDP] in planner/unit_layout.h). Rank i's shard is [its chunk i of the trainable region | its
// chunk i of the frozen region], so its gradient shard (the reduce-scatter of the trainable region), m and v line up
// with the shard's trainable part, and the optimizer never reads or writes the frozen part. Full training is the
// trainable region alone.
class FlatParam {
 public:
  // Allocates the sharded state (parameters, gradient, m, v) through `tracker` and initialises this rank's shard of
  // the parameters exactly as the unsharded reference does (Note [Sharded init] in param_init.h).
  FlatParam(const runtime::ModelLayout& model, runtime::UnitParamLayout unit, UnitLayout sizes, int shard_index,
            const runtime::InitOptions& init, TrackingAllocator& tracker);
  // Replaces this rank's shard by its elements of `model_flat` (laid out as `model`): its chunk of the trainable
  // region, then of the frozen one (Note [Frozen shards]), as the constructor initialises them. How a rank whose
  // model is a TP slice or a pipeline rank's stages starts from its share of the whole model's init.
  void load_shard(const runtime::ModelLayout& model, std::span<const float> model_flat);

  const UnitLayout& sizes() const { return sizes_; }
  const runtime::UnitParamLayout& unit_layout() const { return unit_; }
  int shard_index() const { return shard_index_; }
  bool gathers() const { return sizes_.gathers; }
  bool grad_copies() const { return sizes_.grad_copies; }

  // Sharded state (the whole flat parameter when the group is 1); Note [Frozen shards].
  std::span<float> shard() { return shard_.values(); }
  std::span<float> trainable_shard() { return shard().first(static_cast<std::size_t>(trainable_shard_elements_)); }
  std::span<float> frozen_shard() { return shard().subspan(static_cast<std::size_t>(trainable_shard_elements_)); }
  std::span<float> shard_grad() { return shard_grad_.values(); }
  std::span<float> exp_avg() { return exp_avg_.values(); }
  std::span<float> exp_avg_sq() { return exp_avg_sq_.values(); }

  // The gathered flat parameter (padded_elements), allocated by allocate_unsharded and freed by free_unsharded.
  bool unsharded_allocated() const { return unsharded_.allocated(); }
  std::span<float> allocate_unsharded();
  std::span<float> unsharded() { return unsharded_.values(); }
  // After the all-gather into unsharded() completed: Note [Frozen shards]'s reorder.
  void finish_unshard();
  // The same reorder of any buffer gathered from every rank's shard().
  void gathered_to_unit_order(std::span<float> gathered) const;
  void free_unsharded() { unsharded_.release(); }

  // The full-size gradient backward writes into (grad_padded_elements, zeroed), when the unit reduces one.
  bool unsharded_grad_allocated() const { return unsharded_grad_.allocated(); }
  std::span<float> allocate_unsharded_grad();
  std::span<float> unsharded_grad() { return unsharded_grad_.values(); }
  void free_unsharded_grad() { unsharded_grad_.release(); }

  // Any other buffer tracked by the same allocator (the comm buffer a reduction writes into).
  TrackedBuffer make_buffer(MemoryCategory category, std::int64_t elements) {
    return TrackedBuffer(*tracker_, category, elements);
  }

  // What the layers compute with: the gathered buffer, or the replicated parameters themselves.
  std::span<float> compute_params();
  // Where backward adds parameter gradients: the full-size gradient copy, or the replicated gradient itself.
  std::span<float> compute_grads();

  // This rank's shard of the parameters copied into `model_flat` (model_layout order) at its model offsets; the
  // padding is dropped. Used to assemble the full model after gathering every unit.
  void scatter_into_model(const runtime::ModelLayout& model, std::span<const float> unit_flat,
                          std::span<float> model_flat) const;

 private:
  runtime::UnitParamLayout unit_;
  UnitLayout sizes_;
  int shard_index_ = 0;
  std::int64_t trainable_shard_elements_ = 0;  // Note [Frozen shards]
  TrackingAllocator* tracker_;
  TrackedBuffer shard_, shard_grad_, exp_avg_, exp_avg_sq_;
  TrackedBuffer unsharded_, unsharded_grad_;
};

}  // namespace shardplan::runner
