// DeviceFlatParam: allocation and upload of the sharded state, the transient buffers, and layer views.
#include "device_flat_param.h"

#include <string>
#include <vector>

#include "cuda_check.h"
#include "cuda_pool_backend.h"
#include "errors.h"
#include "flat_param.h"

namespace shardplan::gpu {

DeviceFlatParam::DeviceFlatParam(const runtime::ModelLayout& model, runtime::UnitParamLayout unit, UnitLayout sizes,
                                 int shard_index, const runtime::InitOptions& init, DeviceDType gather_dtype,
                                 DevicePool& pool, cudaStream_t stream)
    : unit_(std::move(unit)), sizes_(std::move(sizes)), shard_index_(shard_index), gather_dtype_(gather_dtype),
      pool_(&pool) {
  if (unit_.element_count != sizes_.param_count) {
    throw InternalError("unit '" + sizes_.name + "': runtime layout has " + std::to_string(unit_.element_count) +
                        " elements, the plan's unit layout " + std::to_string(sizes_.param_count));
  }
  const StreamRef on = stream_ref(stream);
  const auto fp32_bytes = [](std::int64_t elements) { return elements * static_cast<std::int64_t>(sizeof(float)); };
  shard_ = pool.allocate(MemoryCategory::sharded_params, fp32_bytes(sizes_.shard_elements), on);
  shard_grad_ = pool.allocate(MemoryCategory::sharded_grads, fp32_bytes(sizes_.grad_shard_elements), on);
  exp_avg_ = pool.allocate(MemoryCategory::optimizer_states, fp32_bytes(sizes_.optimizer_shard_elements), on);
  exp_avg_sq_ = pool.allocate(MemoryCategory::optimizer_states, fp32_bytes(sizes_.optimizer_shard_elements), on);

  std::vector<float> host(static_cast<std::size_t>(sizes_.shard_elements));
  runner::init_unit_shard(model, unit_, init, static_cast<std::int64_t>(shard_index_) * sizes_.shard_elements, host);
  if (!host.empty()) {
    CUDA_CHECK(cudaMemcpyAsync(shard(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  }
  for (const DeviceBuffer* zeroed : {&shard_grad_, &exp_avg_, &exp_avg_sq_}) {
    if (zeroed->allocated()) {
      CUDA_CHECK(cudaMemsetAsync(zeroed->data(), 0, static_cast<std::size_t>(zeroed->bytes()), stream));
    }
  }
  // `host` is pageable, so cudaMemcpyAsync has staged it before returning (CUDA Runtime API, "API synchronization
  // behavior"); no wait is needed before it goes out of scope.
}

void* DeviceFlatParam::allocate_unsharded(StreamRef stream) {
  SHARDPLAN_CHECK(!unsharded_.allocated(), "unit '" + sizes_.name + "' gathered twice");
  unsharded_ = pool_->allocate(sizes_.gathered_category, sizes_.padded_elements * element_bytes(gather_dtype_), stream);
  return unsharded_.data();
}

float* DeviceFlatParam::ensure_unsharded_grad(cudaStream_t stream) {
  if (!unsharded_grad_.allocated()) {
    unsharded_grad_ = pool_->allocate(MemoryCategory::unsharded_grads,
                                      sizes_.grad_padded_elements * static_cast<std::int64_t>(sizeof(float)),
                                      stream_ref(stream));
    CUDA_CHECK(cudaMemsetAsync(unsharded_grad_.data(), 0, static_cast<std::size_t>(unsharded_grad_.bytes()), stream));
  }
  return unsharded_grad();
}

float* DeviceFlatParam::allocate_reduce_output(StreamRef stream) {
  SHARDPLAN_CHECK(!reduce_output_.allocated(), "unit '" + sizes_.name + "' reduced twice at once");
  reduce_output_ = pool_->allocate(MemoryCategory::comm_buffers,
                                   sizes_.grad_shard_elements * static_cast<std::int64_t>(sizeof(float)), stream);
  return reduce_output();
}

std::int64_t DeviceFlatParam::layer_offset(const runtime::ModelLayout& model, std::size_t layer) const {
  SHARDPLAN_CHECK(layer < model.param_owner.size(), "layer index out of range");
  const std::size_t owner = model.param_owner[layer];
  for (std::size_t position = 0; position < unit_.layers.size(); ++position) {
    if (unit_.layers[position] == owner) return unit_.layer_offsets_elements[position];
  }
  throw InternalError("layer " + std::to_string(layer) + " (or the layer it is tied to) is not in unit '" +
                      sizes_.name + "'");
}

DeviceLayerParams DeviceFlatParam::layer_params(const runtime::ModelLayout& model, std::size_t layer) const {
  const bool gathered = sizes_.gathers;
  SHARDPLAN_CHECK(!gathered || unsharded_.allocated(), "unit '" + sizes_.name + "' used while not gathered");
  const DeviceDType dtype = gathered ? gather_dtype_ : DeviceDType::f32;
  const auto* base = static_cast<const char*>(gathered ? unsharded_.data() : shard_.data());
  const std::int64_t offset = layer_offset(model, layer);
  DeviceLayerParams params;
  for (const auto& slot : model.layers[model.param_owner[layer]].tensors) {
    params.tensors.push_back({slot.name, slot.shape, base + (offset + slot.offset_elements) * element_bytes(dtype),
                              dtype, slot.element_count});
  }
  return params;
}

DeviceLayerGrads DeviceFlatParam::layer_grads(const runtime::ModelLayout& model, std::size_t layer) const {
  float* base = sizes_.grad_copies ? unsharded_grad() : shard_grad();
  SHARDPLAN_CHECK(base != nullptr, "unit '" + sizes_.name + "' has no gradient buffer for backward");
  const std::int64_t offset = layer_offset(model, layer);
  DeviceLayerGrads grads;
  for (const auto& slot : model.layers[model.param_owner[layer]].tensors) {
    grads.tensors.push_back({slot.name, base + offset + slot.offset_elements, slot.element_count});
  }
  return grads;
}

}  // namespace shardplan::gpu
