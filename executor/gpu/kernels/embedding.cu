// Token embedding kernels: a row gather forward, an atomic scatter-add of rows into the table's gradient backward.
#include <math_constants.h>

#include "device_kernels.h"
#include "launch_helpers.cuh"

namespace shardplan::gpu::kernels {
namespace {

// One thread per output element; consecutive threads read consecutive floats of one table row.
__global__ void embedding_forward_kernel(const std::int32_t* tokens, const float* table, std::int64_t count,
                                         std::int64_t vocab, std::int64_t width, float* out) {
  for (std::int64_t i = detail::grid_start(); i < count; i += detail::grid_stride()) {
    const std::int64_t token = tokens[i / width];
    out[i] = token >= 0 && token < vocab ? table[token * width + i % width] : CUDART_NAN_F;
  }
}

// Note [Embedding scatter]: the CPU adds rows in token order; here every element is an atomicAdd, so the rows of a
// token that occurs twice are summed in whatever order the threads run. Sorting tokens first (as PyTorch's
// deterministic mode does) would fix the order; for fp32 gradients the last-bit difference is accepted.
__global__ void embedding_backward_kernel(const std::int32_t* tokens, const float* d_out, std::int64_t count,
                                          std::int64_t vocab, std::int64_t width, float* grad_table) {
  for (std::int64_t i = detail::grid_start(); i < count; i += detail::grid_stride()) {
    const std::int64_t token = tokens[i / width];
    if (token >= 0 && token < vocab) atomicAdd(grad_table + token * width + i % width, d_out[i]);
  }
}

}  // namespace

void embedding_forward(cudaStream_t stream, const std::int32_t* tokens, const float* table, std::int64_t token_count,
                       std::int64_t vocab, std::int64_t width, float* out) {
  KERNEL_CHECK(token_count >= 0 && vocab > 0 && width > 0, "embedding needs a vocabulary and a width");
  const std::int64_t count = token_count * width;
  if (count == 0) return;
  embedding_forward_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(tokens, table, count, vocab,
                                                                                   width, out);
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(cudaStream_t stream, const std::int32_t* tokens, const float* d_out, std::int64_t token_count,
                        std::int64_t vocab, std::int64_t width, float* grad_table) {
  KERNEL_CHECK(token_count >= 0 && vocab > 0 && width > 0, "embedding needs a vocabulary and a width");
  const std::int64_t count = token_count * width;
  if (count == 0) return;
  embedding_backward_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(tokens, d_out, count, vocab,
                                                                                    width, grad_table);
  CUDA_CHECK_LAUNCH();
}

}  // namespace shardplan::gpu::kernels
