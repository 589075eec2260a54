// Grid-stride elementwise kernels for the GPU runner's gradient accumulation.
#include "grad_reduction.h"

#include <algorithm>

#include "cuda_check.h"

namespace shardplan::gpu {
namespace {

constexpr int kThreads = 256;

int blocks_for(std::int64_t count) {
  // Enough blocks to fill an H100 several times over; the grid-stride loop covers any count.
  return static_cast<int>(std::min<std::int64_t>((count + kThreads - 1) / kThreads, 4096));
}

__global__ void accumulate_scaled_kernel(float* target, const float* source, std::int64_t count, float scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    target[i] += scale * source[i];
  }
}

__global__ void scale_kernel(float* values, std::int64_t count, float scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    values[i] *= scale;
  }
}

}  // namespace

void accumulate_scaled(cudaStream_t stream, float* target, const float* source, std::int64_t count, float scale) {
  if (count <= 0) return;
  accumulate_scaled_kernel<<<blocks_for(count), kThreads, 0, stream>>>(target, source, count, scale);
  CUDA_CHECK_LAUNCH();
}

void scale_in_place(cudaStream_t stream, float* values, std::int64_t count, float scale) {
  if (count <= 0) return;
  scale_kernel<<<blocks_for(count), kThreads, 0, stream>>>(values, count, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace shardplan::gpu
