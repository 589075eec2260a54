// Rotary position embedding kernels (Su et al. 2021, HF Llama's rotate-half): the table, rotation and its inverse.
#include "device_kernels.h"
#include "launch_helpers.cuh"

namespace shardplan::gpu::kernels {
namespace {

// As rope_table in rope.cpp: inv_freq = theta^(−2i/head_dim) and the angle p·inv_freq in double, cos and sin rounded
// to float once. CUDA's double pow/cos/sin are within 2 ulp of double (CUDA C Programming Guide, "Mathematical
// Functions"), so the rounded floats match the host's but for rare ties at the float rounding boundary.
__global__ void rope_table_kernel(std::int64_t count, std::int64_t half_dim, std::int64_t head_dim, double theta,
                                  float* cos_out, float* sin_out) {
  for (std::int64_t at = detail::grid_start(); at < count; at += detail::grid_stride()) {
    const std::int64_t p = at / half_dim, i = at % half_dim;
    const double inv_freq = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(p) * inv_freq;
    cos_out[at] = static_cast<float>(cos(angle));
    sin_out[at] = static_cast<float>(sin(angle));
  }
}

// One thread per (token, head, pair i): (x₁, x₂) = (x[i], x[i + half]) ← (x₁c − x₂s, x₂c + x₁s) with s = ±sin, the
// sign −1 turning backwards. Each pair is read and written by one thread only, so in place is safe.
__global__ void rope_rotate_kernel(const float* cos_table, const float* sin_table, std::int64_t seq_len, float* x,
                                   std::int64_t pairs, std::int64_t heads, std::int64_t half, float sign) {
  for (std::int64_t at = detail::grid_start(); at < pairs; at += detail::grid_stride()) {
    const std::int64_t i = at % half, head_row = at / half;  // head_row = token·heads + head
    const std::int64_t position = (head_row / heads) % seq_len;
    const float c = cos_table[position * half + i];
    const float s = sign * sin_table[position * half + i];
    float* head = x + head_row * 2 * half;
    const float x1 = head[i], x2 = head[i + half];
    head[i] = x1 * c - x2 * s;
    head[i + half] = x2 * c + x1 * s;
  }
}

void rotate(cudaStream_t stream, const float* cos, const float* sin, std::int64_t seq_len, float* x,
            std::int64_t tokens, std::int64_t heads, std::int64_t head_dim, float sign) {
  KERNEL_CHECK(seq_len > 0 && tokens >= 0 && heads > 0 && head_dim > 0 && head_dim % 2 == 0,
               "RoPE needs a positive seq_len and heads and an even head_dim");
  const std::int64_t half = head_dim / 2, pairs = tokens * heads * half;
  if (pairs == 0) return;
  rope_rotate_kernel<<<detail::grid_for(pairs), detail::kBlock, 0, stream>>>(cos, sin, seq_len, x, pairs, heads, half,
                                                                            sign);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_table(cudaStream_t stream, std::int64_t seq_len, std::int64_t head_dim, double theta, float* cos,
                float* sin) {
  KERNEL_CHECK(seq_len > 0 && head_dim > 0 && head_dim % 2 == 0 && theta > 0.0,
               "RoPE needs an even head_dim, a positive seq_len and a positive theta");
  const std::int64_t half = head_dim / 2, count = seq_len * half;
  rope_table_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(count, half, head_dim, theta, cos, sin);
  CUDA_CHECK_LAUNCH();
}

void rope_forward(cudaStream_t stream, const float* cos, const float* sin, std::int64_t seq_len, float* x,
                  std::int64_t tokens, std::int64_t heads, std::int64_t head_dim) {
  rotate(stream, cos, sin, seq_len, x, tokens, heads, head_dim, 1.0f);
}

void rope_backward(cudaStream_t stream, const float* cos, const float* sin, std::int64_t seq_len, float* x,
                   std::int64_t tokens, std::int64_t heads, std::int64_t head_dim) {
  rotate(stream, cos, sin, seq_len, x, tokens, heads, head_dim, -1.0f);
}

}  // namespace shardplan::gpu::kernels
