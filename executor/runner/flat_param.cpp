// FlatParam: sharded initialisation, gathered and gradient buffers of one unit (Note [FlatParam layout]).
#include "flat_param.h"

#include <algorithm>
#include <string>

#include "errors.h"

namespace shardplan::runner {

namespace {

// Calls visit(layer_index_in_unit, model_first_element, unit_begin, count) for each piece of the unit range
// [begin, end) that falls inside one of its layers (the padding after the last layer falls in none).
template <typename Visit>
void for_each_piece(const runtime::ModelLayout& model, const runtime::UnitParamLayout& unit, std::int64_t begin,
                    std::int64_t end, Visit visit) {
  for (std::size_t i = 0; i < unit.layers.size(); ++i) {
    const std::size_t layer = unit.layers[i];
    const std::int64_t layer_begin = unit.layer_offsets_elements[i];
    const std::int64_t layer_end = layer_begin + model.layers[layer].element_count;
    const std::int64_t from = std::max(begin, layer_begin);
    const std::int64_t to = std::min(end, layer_end);
    if (from >= to) continue;
    visit(model.layer_offsets_elements[layer] + (from - layer_begin), from, to - from);
  }
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
  for_each_piece(model, unit, 0, unit.element_count,
                 [&](std::int64_t model_first, std::int64_t unit_begin, std::int64_t count) {
                   std::copy_n(unit_flat.begin() + unit_begin, count, model_flat.begin() + model_first);
                 });
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
  shard_ = TrackedBuffer(tracker, MemoryCategory::sharded_params, sizes_.shard_elements);
  shard_grad_ = TrackedBuffer(tracker, MemoryCategory::sharded_grads, sizes_.grad_shard_elements);
  exp_avg_ = TrackedBuffer(tracker, MemoryCategory::optimizer_states, sizes_.optimizer_shard_elements);
  exp_avg_sq_ = TrackedBuffer(tracker, MemoryCategory::optimizer_states, sizes_.optimizer_shard_elements);
  init_unit_shard(model, unit_, init, static_cast<std::int64_t>(shard_index_) * sizes_.shard_elements, shard());
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
