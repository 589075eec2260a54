// GEMMs and column sums evaluated in Eigen-owned aligned temporaries, so their bits never depend on the destination.
#pragma once

#include "runtime_types.h"

namespace shardplan::runtime {

// Note [Aligned products]: Eigen peels the first elements of an unaligned destination and computes them through its
// scalar path; for a small (coefficient-based) product or a column sum that path sums in another order than the
// vectorised one, so the same product written into a buffer at another address modulo the packet size would round
// differently. Parameters and gradients sit at arbitrary float offsets inside a unit's flat parameter, and the runtime
// promises the same bits wherever a layer's buffers live (Note [Deterministic reductions]). So every product is first
// evaluated into a fresh Eigen matrix — always packet-aligned — and then copied or added elementwise, which is exact.
// The extra pass is O(output) against the product's O(output · inner).
template <typename Dst, typename Product>
void assign_product(Dst&& dst, const Product& product) {
  const RowMatrix value = product;
  dst = value;
}

template <typename Dst, typename Product>
void add_product(Dst&& dst, const Product& product) {
  const RowMatrix value = product;
  dst += value;
}

// grad[0..cols) += Σ_rows matrix(row, ·), with the column sums evaluated in an aligned temporary (same reason).
template <typename Matrix>
void add_column_sums(float* grad, const Matrix& matrix) {
  const Eigen::RowVectorXf sums = matrix.colwise().sum();
  Eigen::Map<Eigen::RowVectorXf>(grad, sums.size()) += sums;
}

}  // namespace shardplan::runtime
