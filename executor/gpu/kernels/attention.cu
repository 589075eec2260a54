// Causal grouped-query attention kernels, unfused: fp32 softmax(q·kᵀ/√d) and its product with v, and their backward.
#include <math_constants.h>

#include <cmath>

#include "device_kernels.h"
#include "launch_helpers.cuh"

namespace shardplan::gpu::kernels {
namespace {

// The q/k/v/o projections around these kernels are GEMMs (gemm.h).
//
// Note [Naive attention cost]: this is the straightforward version, matching attention.cpp step for step. It keeps
// probs, [micro_batch × heads × seq × seq] fp32 — O(s²) memory per (sequence, head): 2 GiB for one sequence of 4096
// tokens with 32 heads — and does no tiling: every query row re-reads its keys and values from global memory
// (L2 helps, shared memory is not used beyond one row), and backward needs an s² scratch for dL/dscores besides.
// FlashAttention (Dao et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness")
// is the way to do better: it tiles q, k, v through shared memory with an online softmax, never writes P, and
// recomputes it blockwise in backward, in O(s) memory. This version is the reference such a kernel is checked
// against, and what small models run.

constexpr int kRowBlock = 128;  // threads per query row

struct RowIndex {
  std::int64_t b, head, i, kv_head;
};
// Block → (sequence b, query head, query row i), and the kv head it reads (HF repeat_kv: head / group).
__device__ RowIndex row_of_block(const AttentionDims& dims) {
  const std::int64_t block = blockIdx.x;
  const std::int64_t i = block % dims.seq_len, bh = block / dims.seq_len;
  const std::int64_t head = bh % dims.num_heads, b = bh / dims.num_heads;
  return {b, head, i, head / (dims.num_heads / dims.num_kv_heads)};
}

// One block per (b, head, i): P[i, j] = exp((s_ij − max)·scale) / Σ for j ≤ i with s = q_i·k_j, as
// attention_probs in attention.cpp (which subtracts the max of the unscaled scores, then scales); zero for j > i.
__global__ void attention_probs_kernel(AttentionDims dims, const float* q, const float* k, float scale,
                                       float* probs) {
  extern __shared__ float q_row[];  // head_dim floats
  const RowIndex at = row_of_block(dims);
  const std::int64_t s = dims.seq_len, d = dims.head_dim;
  const std::int64_t q_width = dims.num_heads * d, kv_width = dims.num_kv_heads * d;
  const float* qi = q + (at.b * s + at.i) * q_width + at.head * d;
  for (std::int64_t c = threadIdx.x; c < d; c += blockDim.x) q_row[c] = qi[c];
  __syncthreads();
  float* p = probs + ((at.b * dims.num_heads + at.head) * s + at.i) * s;
  float row_max = -CUDART_INF_F;
  for (std::int64_t j = threadIdx.x; j <= at.i; j += blockDim.x) {
    const float* kj = k + (at.b * s + j) * kv_width + at.kv_head * d;
    float score = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) score += q_row[c] * kj[c];
    p[j] = score;
    row_max = fmaxf(row_max, score);
  }
  row_max = detail::block_reduce(row_max, detail::MaxOp{}, -CUDART_INF_F);
  double sum = 0.0;  // each thread revisits its own j, so no barrier is needed between the passes
  for (std::int64_t j = threadIdx.x; j <= at.i; j += blockDim.x) {
    const float e = expf((p[j] - row_max) * scale);
    p[j] = e;
    sum += e;
  }
  const auto total = static_cast<float>(detail::block_reduce(sum, detail::SumOp{}, 0.0));
  for (std::int64_t j = threadIdx.x; j < s; j += blockDim.x) p[j] = j <= at.i ? p[j] / total : 0.0f;
}

// One thread per output element (token, head, c): out = Σ_{j ≤ i} rows[b, head, i, j]·kv[j, kv_head, c]. The same
// product serves forward and backward: context = P·V (rows = probs, kv = v) and dq = dS·K (rows = d_scores, kv = k).
__global__ void causal_rows_times_kv_kernel(AttentionDims dims, const float* rows, const float* kv, float* out) {
  const std::int64_t s = dims.seq_len, d = dims.head_dim, group = dims.num_heads / dims.num_kv_heads;
  const std::int64_t q_width = dims.num_heads * d, kv_width = dims.num_kv_heads * d;
  const std::int64_t count = dims.micro_batch * s * q_width;
  for (std::int64_t at = detail::grid_start(); at < count; at += detail::grid_stride()) {
    const std::int64_t c = at % d, head = (at / d) % dims.num_heads, token = at / q_width;
    const std::int64_t b = token / s, i = token % s;
    const float* row = rows + ((b * dims.num_heads + head) * s + i) * s;
    const float* column = kv + b * s * kv_width + (head / group) * d + c;
    float sum = 0.0f;
    for (std::int64_t j = 0; j <= i; ++j) sum += row[j] * column[j * kv_width];
    out[at] = sum;
  }
}

// One block per (b, head, i): dP[i, j] = dO_i·v_j, then the softmax backward of attention.cpp,
// dS[i, j] = P[i, j]·(dP[i, j] − Σ_j P·dP)·scale, zero above the diagonal.
__global__ void attention_dscores_kernel(AttentionDims dims, const float* v, const float* probs,
                                         const float* d_context, float scale, float* d_scores) {
  extern __shared__ float do_row[];  // head_dim floats
  const RowIndex at = row_of_block(dims);
  const std::int64_t s = dims.seq_len, d = dims.head_dim;
  const std::int64_t q_width = dims.num_heads * d, kv_width = dims.num_kv_heads * d;
  const float* doi = d_context + (at.b * s + at.i) * q_width + at.head * d;
  for (std::int64_t c = threadIdx.x; c < d; c += blockDim.x) do_row[c] = doi[c];
  __syncthreads();
  const std::int64_t row = ((at.b * dims.num_heads + at.head) * s + at.i) * s;
  const float* p = probs + row;
  float* ds = d_scores + row;
  double p_dot_dp = 0.0;
  for (std::int64_t j = threadIdx.x; j <= at.i; j += blockDim.x) {
    const float* vj = v + (at.b * s + j) * kv_width + at.kv_head * d;
    float dp = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) dp += do_row[c] * vj[c];
    ds[j] = dp;
    p_dot_dp += static_cast<double>(p[j]) * dp;
  }
  const auto row_dot = static_cast<float>(detail::block_reduce(p_dot_dp, detail::SumOp{}, 0.0));
  for (std::int64_t j = threadIdx.x; j < s; j += blockDim.x) {
    ds[j] = j <= at.i ? p[j] * (ds[j] - row_dot) * scale : 0.0f;
  }
}

// One thread per dk/dv element (token j, kv head, c), summing over the query heads of its group and the rows i ≥ j
// that see key j: dk = Σ dS[i, j]·q[i, head, c], dv = Σ P[i, j]·dO[i, head, c]. Each output has one writer.
__global__ void attention_dkv_kernel(AttentionDims dims, const float* q, const float* probs, const float* d_context,
                                     const float* d_scores, float* dk, float* dv) {
  const std::int64_t s = dims.seq_len, d = dims.head_dim, group = dims.num_heads / dims.num_kv_heads;
  const std::int64_t q_width = dims.num_heads * d, kv_width = dims.num_kv_heads * d;
  const std::int64_t count = dims.micro_batch * s * kv_width;
  for (std::int64_t at = detail::grid_start(); at < count; at += detail::grid_stride()) {
    const std::int64_t c = at % d, kv_head = (at / d) % dims.num_kv_heads, token = at / kv_width;
    const std::int64_t b = token / s, j = token % s;
    float dk_sum = 0.0f, dv_sum = 0.0f;
    for (std::int64_t head = kv_head * group; head < (kv_head + 1) * group; ++head) {
      const std::int64_t scores = (b * dims.num_heads + head) * s * s;
      const std::int64_t column = b * s * q_width + head * d + c;
      for (std::int64_t i = j; i < s; ++i) {
        dk_sum += d_scores[scores + i * s + j] * q[column + i * q_width];
        dv_sum += probs[scores + i * s + j] * d_context[column + i * q_width];
      }
    }
    dk[at] = dk_sum;
    dv[at] = dv_sum;
  }
}

void check_dims(const AttentionDims& dims) {
  KERNEL_CHECK(dims.micro_batch >= 0 && dims.seq_len > 0 && dims.head_dim > 0 && dims.num_kv_heads > 0 &&
                   dims.num_heads > 0 && dims.num_heads % dims.num_kv_heads == 0,
               "attention needs positive sizes and num_kv_heads dividing num_heads");
}

unsigned int row_blocks(const AttentionDims& dims) {
  return detail::row_grid(dims.micro_batch * dims.num_heads * dims.seq_len);
}

float softmax_scale(const AttentionDims& dims) { return 1.0f / std::sqrt(static_cast<float>(dims.head_dim)); }

}  // namespace

void attention_forward(cudaStream_t stream, const AttentionDims& dims, const float* q, const float* k, const float* v,
                       float* probs, float* context) {
  check_dims(dims);
  if (dims.micro_batch == 0) return;
  const auto row_bytes = static_cast<std::size_t>(dims.head_dim) * sizeof(float);
  attention_probs_kernel<<<row_blocks(dims), kRowBlock, row_bytes, stream>>>(dims, q, k, softmax_scale(dims), probs);
  CUDA_CHECK_LAUNCH();
  const std::int64_t count = dims.tokens() * dims.q_width();
  causal_rows_times_kv_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(dims, probs, v, context);
  CUDA_CHECK_LAUNCH();
}

void attention_backward(cudaStream_t stream, const AttentionDims& dims, const float* q, const float* k, const float* v,
                        const float* probs, const float* d_context, float* d_scores, float* dq, float* dk,
                        float* dv) {
  check_dims(dims);
  if (dims.micro_batch == 0) return;
  const auto row_bytes = static_cast<std::size_t>(dims.head_dim) * sizeof(float);
  attention_dscores_kernel<<<row_blocks(dims), kRowBlock, row_bytes, stream>>>(dims, v, probs, d_context,
                                                                               softmax_scale(dims), d_scores);
  CUDA_CHECK_LAUNCH();
  const std::int64_t q_count = dims.tokens() * dims.q_width(), kv_count = dims.tokens() * dims.kv_width();
  causal_rows_times_kv_kernel<<<detail::grid_for(q_count), detail::kBlock, 0, stream>>>(dims, d_scores, k, dq);
  CUDA_CHECK_LAUNCH();
  attention_dkv_kernel<<<detail::grid_for(kv_count), detail::kBlock, 0, stream>>>(dims, q, probs, d_context,
                                                                                  d_scores, dk, dv);
  CUDA_CHECK_LAUNCH();
}

}  // namespace shardplan::gpu::kernels
