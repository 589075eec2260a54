// FlatParam: sharded initialisation, gathered and gradient buffers of one unit (Note [FlatParam layout]).
#include "flat_param.h"

#include <algorithm>
#include <string>

#include "errors.h"

namespace shardplan::runner {

namespace {

// Calls visit(model_first_element, unit_begin, count) for each piece of the unit range [begin, end) that falls inside
// one of its tensors (Note [Trainable-first unit layout]; the padding falls in none).
template <typename Visit>
void for_each_piece(const runtime::ModelLayout& model, const runtime::UnitParamLayout& unit, std::int64_t begin,
                    std::int64_t end, Visit visit) {
  for (std::size_t i = 0; i < unit.layers.size(); ++i) {
    const std::size_t layer = unit.layers[i];
    const auto& slots = model.layers[layer].tensors;
    for (std::size_t slot = 0; slot < slots.size(); ++slot) {
      const std::int64_t tensor_begin = unit.tensor_offsets_elements[i][slot];
      const std::int64_t tensor_end = tensor_begin + slots[slot].element_count;
      const std::int64_t from = std::max(begin, tensor_begin);
      const std::int64_t to = std::min(end, tensor_end);
      if (from >= to) continue;
      visit(model.layer_offsets_elements[layer] + slots[slot].offset_elements + (from - tensor_begin), from, to - from);
    }
  }
}

// The unit ranges rank `index`'s shard holds (Note [Frozen shards]): its chunk of the trainable region, then of the
// frozen region; calls visit(unit_first, shard_offset, count) for each non-empty one.
template <typename Visit>
void for_each_shard_range(std::int64_t trainable_region, std::int64_t trainable_shard, std::int64_t frozen_shard,
                          int index, Visit visit) {
  if (trainable_shard > 0) visit(index * trainable_shard, std::int64_t{0}, trainable_shard);
  if (frozen_shard > 0) visit(trainable_region + index * frozen_shard, trainable_shard, frozen_shard);
}

}  // namespace

void init_unit_shard(const runtime::ModelLayout& model, const runtime::UnitParamLayout& unit,
                     const runtime::InitOptions& init, std::int64_t first, std::span<float> shard) {
  std::fill(shard.begin(), shard.end(), 0.0f);  // the padding
  const auto count = static_cast<std::int64_t>(shard.size());
  for_each_piece(model, unit, first, first + count,
                 [&](std::int64_t model_first, std::int64_t unit_begin, std::int64_t piece) {
                   runtime::init_parameters(model, init, model_first,
                                            shard.subspan(static_cast<std::size_t>(unit_begin - first),
                                                          static_cast<std::size_t>(piece)));
                 });
}

void copy_unit_shard_from_model(const runtime::ModelLayout& model, const runtime::UnitParamLayout& unit,
                                std::span<const float> model_flat, std::int64_t first, std::span<float> shard) {
  std::fill(shard.begin(), shard.end(), 0.0f);  // the padding
  const auto count = static_cast<std::int64_t>(shard.size());
  for_each_piece(model, unit, first, first + count,
                 [&](std::int64_t model_first, std::int64_t unit_begin, std::int64_t piece) {
                   std::copy_n(model_flat.begin() + model_first, piece, shard.begin() + (unit_begin - first));
                 });
}

void scatter_unit_into_model(const runtime::ModelLayout& model, const runtime::UnitParamLayout& unit,
                             std::span<const float> unit_flat, std::span<float> model_flat) {
  for_each_piece(model, unit, 0, unit.extent_elements(),
                 [&](std::int64_t model_first, std::int64_t unit_begin, std::int64_t count) {
                   std::copy_n(unit_flat.begin() + unit_begin, count, model_flat.begin() + model_first);
                 });
}

void gathered_to_unit_order(std::span<float> gathered, std::int64_t trainable_shard, std::int64_t frozen_shard,
                            int group) {
  if (trainable_shard == 0 || frozen_shard == 0 || group <= 1) return;
  SHARDPLAN_CHECK(static_cast<std::int64_t>(gathered.size()) == (trainable_shard + frozen_shard) * group,
                  "gathered buffer does not hold every rank's shard");
  // After round k: [A₀ … A_{k−1} F₀ … F_{k−1} A_k F_k …]; rotating A_k in front of F₀ … F_{k−1} adds one more.
  for (std::int64_t k = 1; k < group; ++k) {
    const auto first = gathered.begin() + k * trainable_shard;
    std::rotate(first, first + k * frozen_shard, first + k * frozen_shard + trainable_shard);
  }
}

FlatParam::FlatParam(const runtime::ModelLayout& model, runtime::UnitParamLayout unit, UnitLayout sizes,
                     int shard_index, const runtime::InitOptions& init, TrackingAllocator& tracker)
    : unit_(std::move(unit)), sizes_(std::move(sizes)), shard_index_(shard_index), tracker_(&tracker) {
  if (unit_.element_count != sizes_.param_count) {
    throw InternalError("unit '" + sizes_.name + "': runtime layout has " + std::to_string(unit_.element_count) +
                        " elements, the plan's unit layout " + std::to_string(sizes_.param_count));
  }
  if (sizes_.param_group != sizes_.grad_group || sizes_.grad_group != sizes_.optimizer_group) {
    throw InternalError("unit '" + sizes_.name + "': parameter, gradient and optimizer groups differ");
  }
  // Note [Frozen shards]: the trainable region is the gradient's; its shard is the optimizer's.
  const std::int64_t trainable_region = sizes_.grad_elements > 0 ? sizes_.grad_padded_elements : 0;
  trainable_shard_elements_ = trainable_region / sizes_.param_group;
  if (unit_.trainable_elements != sizes_.grad_elements ||
      (unit_.frozen_elements > 0 && unit_.frozen_offset_elements != trainable_region) ||
      unit_.extent_elements() > sizes_.padded_elements ||
      (trainable_region > 0 && sizes_.optimizer_shard_elements != trainable_shard_elements_)) {
    throw InternalError("unit '" + sizes_.name + "': runtime layout trains " +
                        std::to_string(unit_.trainable_elements) + " elements from " +
                        std::to_string(unit_.frozen_offset_elements) + ", the plan's unit layout reduces " +
                        std::to_string(sizes_.grad_elements) + " padded to " + std::to_string(trainable_region));
  }
  shard_ = TrackedBuffer(tracker, MemoryCategory::sharded_params, sizes_.shard_elements);
  shard_grad_ = TrackedBuffer(tracker, MemoryCategory::sharded_grads, sizes_.grad_shard_elements);
  exp_avg_ = TrackedBuffer(tracker, MemoryCategory::optimizer_states, sizes_.optimizer_shard_elements);
  exp_avg_sq_ = TrackedBuffer(tracker, MemoryCategory::optimizer_states, sizes_.optimizer_shard_elements);
  const std::int64_t frozen_shard = sizes_.shard_elements - trainable_shard_elements_;
  for_each_shard_range(trainable_region, trainable_shard_elements_, frozen_shard, shard_index_,
                       [&](std::int64_t unit_first, std::int64_t shard_offset, std::int64_t count) {
                         init_unit_shard(model, unit_, init, unit_first,
                                         shard().subspan(static_cast<std::size_t>(shard_offset),
                                                         static_cast<std::size_t>(count)));
                       });
}

void FlatParam::load_shard(const runtime::ModelLayout& model, std::span<const float> model_flat) {
  const std::int64_t trainable_region = sizes_.grad_elements > 0 ? sizes_.grad_padded_elements : 0;
  for_each_shard_range(trainable_region, trainable_shard_elements_, sizes_.shard_elements - trainable_shard_elements_,
                       shard_index_, [&](std::int64_t unit_first, std::int64_t shard_offset, std::int64_t count) {
                         copy_unit_shard_from_model(model, unit_, model_flat, unit_first,
                                                    shard().subspan(static_cast<std::size_t>(shard_offset),
                                                                    static_cast<std::size_t>(count)));
                       });
}

void FlatParam::gathered_to_unit_order(std::span<float> gathered) const {
  runner::gathered_to_unit_order(gathered, trainable_shard_elements_, sizes_.shard_elements - trainable_shard_elements_,
                                 sizes_.param_group);
}

void FlatParam::finish_unshard() {
  SHARDPLAN_CHECK(unsharded_.allocated(), "unit '" + sizes_.name + "' finished a gather it never allocated");
  gathered_to_unit_order(unsharded());
}

std::span<float> FlatParam::allocate_unsharded() {
  SHARDPLAN_CHECK(!unsharded_.allocated(), "unit '" + sizes_.name + "' gathered twice");
  unsharded_ = TrackedBuffer(*tracker_, sizes_.gathered_category, sizes_.padded_elements);
  return unsharded_.values();
}

std::span<float> FlatParam::allocate_unsharded_grad() {
  SHARDPLAN_CHECK(!unsharded_grad_.allocated(), "unit '" + sizes_.name + "' gradient allocated twice");
  unsharded_grad_ = TrackedBuffer(*tracker_, MemoryCategory::unsharded_grads, sizes_.grad_padded_elements);
  return unsharded_grad_.values();
}

std::span<float> FlatParam::compute_params() {
  if (!sizes_.gathers) return shard();
  SHARDPLAN_CHECK(unsharded_.allocated(), "unit '" + sizes_.name + "' used while not gathered");
  return unsharded();
}

std::span<float> FlatParam::compute_grads() {
  if (!sizes_.grad_copies) return shard_grad();
  if (!unsharded_grad_.allocated()) allocate_unsharded_grad();
  return unsharded_grad();
}

void FlatParam::scatter_into_model(const runtime::ModelLayout& model, std::span<const float> unit_flat,
                                   std::span<float> model_flat) const {
  scatter_unit_into_model(model, unit_, unit_flat, model_flat);
}

}  // namespace shardplan::runner
