// Linear layer math on row-major buffers (y = x·Wᵀ + b, Hugging Face [out, in] weights), forward and backward.
#pragma once

#include <cstdint>

namespace shardplan::runtime {

struct LinearShape {
  std::int64_t rows = 0;  // tokens
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
};

// y[rows × out] = x[rows × in] · weight[out × in]ᵀ (+ bias[out] when non-null). Overwrites y.
void linear_forward(const LinearShape& shape, const float* x, const float* weight, const float* bias, float* y);

// Given dy = dL/dy: grad_weight += dyᵀ·x and grad_bias += column sums of dy (each when non-null: a frozen weight's
// backward runs the input-gradient GEMM only), and dx = dy·weight, added to dx when accumulate_dx (several linears
// read the same input) or written otherwise.
void linear_backward(const LinearShape& shape, const float* x, const float* weight, const float* dy, float* dx,
                     bool accumulate_dx, float* grad_weight, float* grad_bias);

}  // namespace shardplan::runtime
