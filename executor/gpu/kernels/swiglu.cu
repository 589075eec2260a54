// SwiGLU activation kernels (Shazeer 2020): silu(gate)·up forward and its elementwise backward.
#include "device_kernels.h"
#include "launch_helpers.cuh"

namespace shardplan::gpu::kernels {
namespace {

// σ(g) = 1/(1 + e^(−g)) as row_reductions.h's sigmoid: saturates to 0 and 1 without NaN for large |g|.
__device__ inline float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_forward_kernel(const float* gate, const float* up, std::int64_t count, float* act) {
  for (std::int64_t i = detail::grid_start(); i < count; i += detail::grid_stride()) {
    const float g = gate[i];
    const float silu = g * sigmoid(g);
    act[i] = silu * up[i];
  }
}

// As mlp_backward in mlp.cpp: d_up = da·silu(g), d_gate = da·u·σ·(1 + g·(1 − σ)), left to right.
__global__ void swiglu_backward_kernel(const float* gate, const float* up, const float* d_act, std::int64_t count,
                                       float* d_gate, float* d_up) {
  for (std::int64_t i = detail::grid_start(); i < count; i += detail::grid_stride()) {
    const float g = gate[i], da = d_act[i];
    const float s = sigmoid(g);
    d_up[i] = da * (g * s);
    d_gate[i] = da * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

}  // namespace

void swiglu_forward(cudaStream_t stream, const float* gate, const float* up, std::int64_t count, float* act) {
  KERNEL_CHECK(count >= 0, "negative element count");
  if (count == 0) return;
  swiglu_forward_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(gate, up, count, act);
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward(cudaStream_t stream, const float* gate, const float* up, const float* d_act, std::int64_t count,
                     float* d_gate, float* d_up) {
  KERNEL_CHECK(count >= 0, "negative element count");
  if (count == 0) return;
  swiglu_backward_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(gate, up, d_act, count, d_gate, d_up);
  CUDA_CHECK_LAUNCH();
}

}  // namespace shardplan::gpu::kernels
