// RMSNorm math (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"), shared by blocks and the final norm.
#pragma once

#include <cstdint>

namespace shardplan::runtime {

// y = w ⊙ x · r with r = 1/sqrt(mean(x²) + eps), row by row over [rows × width] (HF LlamaRMSNorm, computed in fp32).
// Writes y and the per-row r (kept for backward: one float per token).
void rmsnorm_forward(const float* x, const float* weight, std::int64_t rows, std::int64_t width, double eps, float* y,
                     float* inv_rms);

// With x̂ = x·r and g = dy ⊙ w: dx += r · (g − x̂ · mean(g ⊙ x̂)) and grad_weight += Σ_rows dy ⊙ x̂.
// dx is accumulated because the norm always sits on a residual branch whose other path already wrote it. A null
// grad_weight (a frozen scale) skips its sum.
void rmsnorm_backward(const float* x, const float* inv_rms, const float* weight, const float* dy, std::int64_t rows,
                      std::int64_t width, float* dx, float* grad_weight);

}  // namespace shardplan::runtime
