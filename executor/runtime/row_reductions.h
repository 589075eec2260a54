// Address-independent row math: fixed-order sums and dots, and a scalar exp, whose bits do not depend on alignment.
#pragma once

#include <cmath>
#include <cstdint>

namespace shardplan::runtime {

// Note [Deterministic reductions]: Eigen vectorises a reduction from the first packet-aligned element of its input,
// so the summation order — and the rounded float — depends on the buffer's address modulo the packet size (32 bytes
// under AVX, more than malloc's 16-byte guarantee). The runtime promises bit-equal results for equal inputs wherever
// they live (a recomputed forward reads a copy of the input; a sharded rank reads its own buffers), so reductions
// over activation rows use these plain loops, accumulating in double in index order. They are O(tokens·width),
// negligible next to the GEMMs, which Eigen packs into its own aligned blocks before multiplying. The same holds for
// transcendental elementwise functions: Eigen computes the unaligned head of a buffer with std::exp and the rest with
// its own vectorised exp, which round differently; exp() below always calls std::exp.
inline double row_sum(const float* x, std::int64_t count) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < count; ++i) sum += static_cast<double>(x[i]);
  return sum;
}

inline double row_dot(const float* a, const float* b, std::int64_t count) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < count; ++i) sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return sum;
}

// x[i] ← exp((x[i] − shift)·scale) for i < count, then returns the fixed-order sum of the results.
inline double exp_shifted_sum(float* x, std::int64_t count, float shift, float scale) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < count; ++i) {
    x[i] = std::exp((x[i] - shift) * scale);
    sum += static_cast<double>(x[i]);
  }
  return sum;
}

// σ(g) = 1/(1 + e^(−g)) with std::exp, for the same reason.
inline float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace shardplan::runtime
