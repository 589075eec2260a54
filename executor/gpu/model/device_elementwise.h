// Host-callable launch functions of the small elementwise kernels the device layers need besides executor/gpu/kernels:
// residual additions, bias rows and their column sums, SiLU, and the embedding gather from a bf16 table.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace shardplan::gpu {

// As Note [Kernel conventions] in device_kernels.h: enqueued on `stream`, device pointers, sizes in elements,
// InternalError for a bad size, nothing launched for a count of zero.

// y[i] += x[i] for i < count: the residual additions of decoder_block.cpp (MatrixView += ConstMatrixView).
void add_in_place(cudaStream_t stream, float* y, const float* x, std::int64_t count);

// y[r, c] += bias[c] over y [rows × cols]: linear_forward's bias.
void add_bias_rows(cudaStream_t stream, float* y, const float* bias, std::int64_t rows, std::int64_t cols);

// grad_bias[c] += Σ_r dy[r, c] over dy [rows × cols], each column summed in double in row order (one thread per
// column, no atomics, so deterministic): linear_backward's bias gradient.
void add_column_sums(cudaStream_t stream, const float* dy, std::int64_t rows, std::int64_t cols, float* grad_bias);

// silu[i] = g·σ(g) with g = gate[i], σ(g) = 1/(1 + e^(−g)): mlp.cpp's "mlp.silu", with the formula of swiglu.cu.
void silu_forward(cudaStream_t stream, const float* gate, std::int64_t count, float* silu);

// out[t] = fp32(table[tokens[t]]) for a bf16 table [vocab × width] (exact: bf16 is the top half of an fp32), NaN rows
// for tokens outside [0, vocab) as kernels::embedding_forward. Reads only the rows it needs, where converting the
// whole table to fp32 first would cost vocab·width·4 bytes of scratch.
void embedding_forward_bf16(cudaStream_t stream, const std::int32_t* tokens, const __nv_bfloat16* table,
                            std::int64_t token_count, std::int64_t vocab, std::int64_t width, float* out);

}  // namespace shardplan::gpu
