// Internal helpers of the kernel .cu files: precondition checks, grid sizing and deterministic block reductions.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <source_location>
#include <string>

#include "cuda_check.h"
#include "errors.h"

namespace shardplan::gpu::kernels::detail {

// A launch function's precondition (sizes, null pointers): InternalError naming the condition, the caller's
// file:line and the launcher's rank, like CUDA_CHECK. A bad size is a bug of the executor, not of the user's input.
#define KERNEL_CHECK(condition, message)                                                                       \
  do {                                                                                                         \
    if (!(condition)) {                                                                                        \
      throw ::shardplan::InternalError(std::string("check failed: ") + #condition + ": " + (message),           \
                                       std::source_location::current(), ::shardplan::gpu::launcher_rank());   \
    }                                                                                                          \
  } while (0)

constexpr int kBlock = 256;       // threads per block of the elementwise and per-row kernels
constexpr int kWarp = 32;
constexpr std::int64_t kMaxGrid = std::int64_t{1} << 20;  // grid-stride loops cover any count beyond this

// Blocks for a grid-stride loop over `count` elements.
inline unsigned int grid_for(std::int64_t count, int block = kBlock) {
  return static_cast<unsigned int>(std::min<std::int64_t>((count + block - 1) / block, kMaxGrid));
}

// A one-block-per-row grid: rows must fit gridDim.x (2³¹ − 1).
inline unsigned int row_grid(std::int64_t rows) {
  KERNEL_CHECK(rows <= std::numeric_limits<int>::max(), "too many rows for a one-block-per-row grid");
  return static_cast<unsigned int>(rows);
}

// First index and stride of a grid-stride loop, in 64 bits (element counts pass 2³¹ for real models).
__device__ inline std::int64_t grid_start() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Note [Block reduction]: every thread of the block must call this (blockDim.x a multiple of 32, at most 1024), and
// every thread gets the result. Warps reduce with shuffles, then warp 0 reduces the warp results. The tree is fixed by
// the block size, so the result is the same on every run (deterministic), though not in the CPU's index order. The
// trailing barrier lets a kernel call it again (the shared slots are reused).
template <typename T, typename Op>
__device__ T block_reduce(T value, Op op, T identity) {
  __shared__ T warp_values[kWarp];
  const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
  }
  if (lane == 0) warp_values[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < blockDim.x / kWarp ? warp_values[lane] : identity;
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
    }
    if (lane == 0) warp_values[0] = value;
  }
  __syncthreads();
  const T result = warp_values[0];
  __syncthreads();
  return result;
}

}  // namespace shardplan::gpu::kernels::detail
