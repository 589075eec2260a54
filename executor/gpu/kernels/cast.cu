// fp32 ↔ bf16 conversion kernels (round-to-nearest-even down, exact up).
#include "device_kernels.h"
#include "launch_helpers.cuh"

namespace shardplan::gpu::kernels {
namespace {

__global__ void fp32_to_bf16_kernel(const float* in, __nv_bfloat16* out, std::int64_t count) {
  for (std::int64_t i = detail::grid_start(); i < count; i += detail::grid_stride()) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void bf16_to_fp32_kernel(const __nv_bfloat16* in, float* out, std::int64_t count) {
  for (std::int64_t i = detail::grid_start(); i < count; i += detail::grid_stride()) out[i] = __bfloat162float(in[i]);
}

}  // namespace

void cast_fp32_to_bf16(cudaStream_t stream, const float* in, __nv_bfloat16* out, std::int64_t count) {
  KERNEL_CHECK(count >= 0, "negative element count");
  if (count == 0) return;
  fp32_to_bf16_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(in, out, count);
  CUDA_CHECK_LAUNCH();
}

void cast_bf16_to_fp32(cudaStream_t stream, const __nv_bfloat16* in, float* out, std::int64_t count) {
  KERNEL_CHECK(count >= 0, "negative element count");
  if (count == 0) return;
  bf16_to_fp32_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(in, out, count);
  CUDA_CHECK_LAUNCH();
}

}  // namespace shardplan::gpu::kernels
