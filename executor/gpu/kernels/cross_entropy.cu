// Softmax cross-entropy kernels of the LM head: per-token loss and probabilities, their mean, the logits' gradient.
#include <math_constants.h>

#include "device_kernels.h"
#include "launch_helpers.cuh"

namespace shardplan::gpu::kernels {
namespace {

// One block per row t, as lm_head_loss.cpp: m = max z, e_j = exp(z_j − m) with Σ e in double, probs = e / Σ,
// loss_t = m + log Σ − z[y_t] in double. The target logit is read before the first barrier (inside the max
// reduction), so in-place (probs == logits) never reads an overwritten value.
__global__ void cross_entropy_forward_kernel(const float* logits, const std::int32_t* targets, std::int64_t vocab,
                                             float* probs, float* token_loss) {
  const std::int64_t row = blockIdx.x;
  const float* z = logits + row * vocab;
  const std::int64_t target = targets[row];
  const bool valid = target >= 0 && target < vocab;
  const float target_logit = valid ? z[target] : CUDART_NAN_F;
  float row_max = -CUDART_INF_F;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) row_max = fmaxf(row_max, z[j]);
  row_max = detail::block_reduce(row_max, detail::MaxOp{}, -CUDART_INF_F);
  float* p = probs + row * vocab;
  double sum = 0.0;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float e = expf(z[j] - row_max);
    p[j] = e;
    sum += e;
  }
  sum = detail::block_reduce(sum, detail::SumOp{}, 0.0);
  const auto total = static_cast<float>(sum);
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) p[j] /= total;
  if (threadIdx.x == 0) {
    token_loss[row] = static_cast<float>(static_cast<double>(row_max) + log(sum) - static_cast<double>(target_logit));
  }
}

// One block: Σ token_loss in double over a fixed assignment of rows to threads and a fixed tree, so the mean is the
// same on every run (no atomics). O(rows) work, negligible next to the vocabulary-sized rows above.
constexpr int kMeanBlock = 1024;
__global__ void mean_kernel(const float* token_loss, std::int64_t rows, float* mean) {
  double sum = 0.0;
  for (std::int64_t t = threadIdx.x; t < rows; t += blockDim.x) sum += token_loss[t];
  sum = detail::block_reduce(sum, detail::SumOp{}, 0.0);
  if (threadIdx.x == 0) *mean = static_cast<float>(sum / static_cast<double>(rows));
}

__global__ void cross_entropy_backward_kernel(const float* probs, const std::int32_t* targets, std::int64_t count,
                                              std::int64_t vocab, float scale, float* d_logits) {
  for (std::int64_t at = detail::grid_start(); at < count; at += detail::grid_stride()) {
    float value = probs[at];
    if (targets[at / vocab] == at % vocab) value -= 1.0f;
    d_logits[at] = value * scale;
  }
}

}  // namespace

void cross_entropy_forward(cudaStream_t stream, const float* logits, const std::int32_t* targets, std::int64_t rows,
                           std::int64_t vocab, float* probs, float* token_loss, float* mean_loss) {
  KERNEL_CHECK(rows > 0 && vocab > 0, "cross-entropy needs at least one row and a vocabulary");
  cross_entropy_forward_kernel<<<detail::row_grid(rows), detail::kBlock, 0, stream>>>(logits, targets, vocab, probs,
                                                                                      token_loss);
  CUDA_CHECK_LAUNCH();
  mean_kernel<<<1, kMeanBlock, 0, stream>>>(token_loss, rows, mean_loss);
  CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(cudaStream_t stream, const float* probs, const std::int32_t* targets, std::int64_t rows,
                            std::int64_t vocab, float grad_loss, float* d_logits) {
  KERNEL_CHECK(rows > 0 && vocab > 0, "cross-entropy needs at least one row and a vocabulary");
  // The same float scale as the CPU's dZ *= grad_output / rows.
  const float scale = grad_loss / static_cast<float>(rows);
  const std::int64_t count = rows * vocab;
  cross_entropy_backward_kernel<<<detail::grid_for(count), detail::kBlock, 0, stream>>>(probs, targets, count, vocab,
                                                                                       scale, d_logits);
  CUDA_CHECK_LAUNCH();
}

}  // namespace shardplan::gpu::kernels
