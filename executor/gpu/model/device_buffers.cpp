// Buffers of the device layers: pool allocations in the activations category, device copies, fp32 parameter views.
#include "device_buffers.h"

#include <cuda_bf16.h>

#include "cuda_check.h"
#include "cuda_pool_backend.h"
#include "device_kernels.h"
#include "errors.h"

namespace shardplan::gpu {

DeviceBuffer typed_buffer(const DeviceContext& context, DeviceDType dtype, std::int64_t count) {
  SHARDPLAN_CHECK(context.pool != nullptr, "device layer context has no pool");
  SHARDPLAN_CHECK(count >= 0, "negative element count " + std::to_string(count));
  return context.pool->allocate(MemoryCategory::activations, count * element_bytes(dtype), stream_ref(context.stream));
}

DeviceBuffer float_buffer(const DeviceContext& context, std::int64_t count) {
  return typed_buffer(context, DeviceDType::f32, count);
}

DeviceActivations make_activations(const DeviceContext& context, int micro_batch, int seq_len, std::int64_t width) {
  DeviceActivations activations;
  activations.micro_batch = micro_batch;
  activations.seq_len = seq_len;
  activations.width = width;
  activations.buffer = float_buffer(context, activations.element_count());
  return activations;
}

void copy_floats(const DeviceContext& context, const float* from, float* to, std::int64_t count) {
  SHARDPLAN_CHECK(count >= 0, "negative element count " + std::to_string(count));
  if (count == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(to, from, static_cast<std::size_t>(count) * sizeof(float), cudaMemcpyDeviceToDevice,
                             context.stream));
}

DeviceActivations copy_activations(const DeviceContext& context, const DeviceActivations& from) {
  DeviceActivations copy = make_activations(context, from.micro_batch, from.seq_len, from.width);
  SHARDPLAN_CHECK(from.buffer.bytes() == copy.buffer.bytes(), "activations buffer does not match its shape");
  copy_floats(context, from.data(), copy.data(), copy.element_count());
  return copy;
}

const float* fp32_values(const DeviceContext& context, const DeviceTensor& tensor, DeviceBuffer& scratch) {
  if (tensor.dtype == DeviceDType::f32) return static_cast<const float*>(tensor.data);
  scratch = float_buffer(context, tensor.element_count);
  kernels::cast_bf16_to_fp32(context.stream, static_cast<const __nv_bfloat16*>(tensor.data), scratch.as<float>(),
                             tensor.element_count);
  return scratch.as<float>();
}

}  // namespace shardplan::gpu
