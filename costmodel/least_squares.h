// Weighted least squares with relative residuals: the solver every calibration fit (calibration.cpp,
// collective_fit.cpp) shares.
#pragma once

#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

namespace shardplan {

// Weighted least squares: minimise Σ (w_i (a_i · x − t_i))² with w_i = 1 / t_i, so every sample's relative error
// counts the same whatever its size (Björck, Numerical Methods for Least Squares Problems, §4.1). Weighting by the
// sample's own time leans the fit toward the faster samples of a noisy set. For collectives measured on MPI ranks
// that suits the step time: a rank that reaches a collective first waits inside it for the others, and that wait is
// the other rank's compute, already counted. Measured on 2 CPU ranks (scripts/demo's loop, 2026-11-30): held-out
// plans B and C +3..+7% and −1..+2% on the quieter runs with these weights, +5..+17% and +10..+25% with weights from
// an unweighted first fit (which follow the mean); noisy runs swing ±30% either way.
inline Eigen::VectorXd weighted_solve(const Eigen::MatrixXd& design, const Eigen::VectorXd& times) {
  Eigen::MatrixXd a = design;
  Eigen::VectorXd b = times;
  for (Eigen::Index row = 0; row < a.rows(); ++row) {
    const double weight = 1.0 / std::max(times(row), 1e-12);
    a.row(row) *= weight;
    b(row) *= weight;
  }
  return a.colPivHouseholderQr().solve(b);
}

inline double relative_residual(double predicted_s, double measured_s) {
  return (predicted_s - measured_s) / std::max(measured_s, 1e-12);
}

struct Residuals {
  double rms = 0;
  double max = 0;
};

// The relative residuals of the fitted model design·x against the measured times: their RMS and largest magnitude.
inline Residuals relative_residuals(const Eigen::MatrixXd& design, const Eigen::VectorXd& x,
                                    const Eigen::VectorXd& times) {
  Residuals residuals;
  if (design.rows() == 0) return residuals;
  double sum = 0;
  for (Eigen::Index row = 0; row < design.rows(); ++row) {
    const double relative = relative_residual(design.row(row).dot(x), times(row));
    sum += relative * relative;
    residuals.max = std::max(residuals.max, std::abs(relative));
  }
  residuals.rms = std::sqrt(sum / static_cast<double>(design.rows()));
  return residuals;
}

}  // namespace shardplan
