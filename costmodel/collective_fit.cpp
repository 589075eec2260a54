// Fitting collectives: α-β per link tier and per collective × group size × tier, and the slowdown of collectives
// that run while their rank computes.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "calibration.h"
#include "errors.h"
#include "least_squares.h"

namespace shardplan {

namespace {

// The largest share of its progress a collective may lose while its rank computes (s ≤ 20): beyond it, samples that
// made no progress beside compute cannot be told from waits the last-issue rule did not catch.
constexpr double kMostProgressLost = 0.95;

// α is fitted only when the message sizes span this factor: over a narrower range a latency and a bandwidth trade
// against each other. Measured: plan A's trace has two sizes (263 and 738 KB); fitted with α it gave α = 62 µs and
// a busbw 2x what its exposed collectives reach, and under-predicted held-out plan C's 3.2 MB all-gather by 40%.
// nccl-tests-style sweeps (`calibrate --bench`) span 1 KiB to 16 MiB, where both are well determined.
constexpr double kLeastSizeSpanForLatency = 16;

// A sample the α-β fit can use: a collective between ranks that moved bytes and took at least a nanosecond (below
// any clock the executors time with: std::chrono::steady_clock, CUDA events at ~0.5 us).
bool usable_sample(const CollectiveSample& sample) {
  return sample.ranks > 1 && sample.message_bytes > 0 && sample.time_s >= 1e-9 && std::isfinite(sample.time_s);
}

}  // namespace

LinkFit fit_link(const std::vector<CollectiveSample>& samples, std::optional<double> progress_lost) {
  LinkFit fit;
  std::vector<const CollectiveSample*> usable;
  for (const auto& sample : samples) {
    if (usable_sample(sample)) usable.push_back(&sample);
  }
  fit.samples = usable.size();
  if (usable.empty()) return fit;
  // Columns: ring steps (× α), bus_factor(n)·S (× 1/B), as collective_cost() models a collective, and the seconds
  // its rank computed beside it (× k, below).
  const auto rows = static_cast<Eigen::Index>(usable.size());
  Eigen::MatrixXd columns(rows, 3);
  Eigen::VectorXd times(rows);
  double smallest_bytes = static_cast<double>(usable.front()->message_bytes), largest_bytes = smallest_bytes;
  for (std::size_t i = 0; i < usable.size(); ++i) {
    const CollectiveAlgorithm& algorithm = collective_algorithm(usable[i]->kind);
    const auto row = static_cast<Eigen::Index>(i);
    columns(row, 0) = algorithm.latency_steps(usable[i]->ranks);
    columns(row, 1) = algorithm.bus_factor(usable[i]->ranks) * static_cast<double>(usable[i]->message_bytes);
    columns(row, 2) = usable[i]->compute_overlap_s;
    times(row) = usable[i]->time_s;
    smallest_bytes = std::min(smallest_bytes, static_cast<double>(usable[i]->message_bytes));
    largest_bytes = std::max(largest_bytes, static_cast<double>(usable[i]->message_bytes));
  }
  const bool with_latency = usable.size() >= 2 && largest_bytes >= kLeastSizeSpanForLatency * smallest_bytes;
  // The unknowns' columns of `columns`: α (when the sizes tell it), 1/B, and k when it is fitted.
  const auto solve = [&](bool with_overlap, const Eigen::VectorXd& target) {
    std::vector<Eigen::Index> picked;
    if (with_latency) picked.push_back(0);
    picked.push_back(1);
    if (with_overlap) picked.push_back(2);
    Eigen::MatrixXd design(rows, static_cast<Eigen::Index>(picked.size()));
    for (std::size_t c = 0; c < picked.size(); ++c) design.col(static_cast<Eigen::Index>(c)) = columns.col(picked[c]);
    const Eigen::VectorXd solution = weighted_solve(design, target);
    Eigen::Vector3d x = Eigen::Vector3d::Zero();
    for (std::size_t c = 0; c < picked.size(); ++c) x(picked[c]) = solution(static_cast<Eigen::Index>(c));
    return x;
  };
  // Note [Collective slowdown] (planner/simulator.cpp): a collective does its own time's work at rate 1 / s while its
  // rank computes (o seconds of it) and 1 otherwise, so t = own + o · (1 − 1/s): the third column's coefficient is
  // the progress lost, k = 1 − 1/s, fitted where the overlaps differ (traces; a sweep has none).
  double lost = 0;
  if (progress_lost) {
    lost = *progress_lost;
  } else if (usable.size() >= 3 && columns.col(2).maxCoeff() > columns.col(2).minCoeff()) {
    lost = std::clamp(solve(true, times)(2), 0.0, kMostProgressLost);
    fit.overlap_fitted = true;
  }
  fit.overlap_slowdown = 1.0 / (1.0 - lost);
  const Eigen::VectorXd own_times = times - lost * columns.col(2);
  Eigen::Vector3d x = solve(false, own_times);
  if (x(0) < 0 || x(1) <= 0) {
    // No latency to be seen: fit bandwidth alone through the origin.
    Eigen::VectorXd slope = weighted_solve(columns.col(1), own_times);
    x = Eigen::Vector3d(0.0, slope(0), 0.0);
  }
  // Positive samples give a positive slope through the origin; anything else is what the trace says (a duration
  // past what a double divides meaningfully), so it is the input's fault, not an invariant of ours.
  if (!(x(1) > 0) || !std::isfinite(x(1)) || !std::isfinite(x(0))) {
    throw InputError("calibrate: the " + std::to_string(usable.size()) + " collective samples of " +
                     std::string(to_string(usable.front()->kind)) + " over " + std::to_string(usable.front()->ranks) +
                     " ranks do not determine a positive bandwidth (check the trace's ts and dur)");
  }
  fit.latency_s = x(0);
  fit.bus_bytes_per_s = 1.0 / x(1);
  x(2) = lost;
  const Residuals residuals = relative_residuals(columns, x, times);
  fit.rms_relative_residual = residuals.rms;
  fit.max_relative_residual = residuals.max;
  return fit;
}

double predicted_time_s(const LinkFit& fit, const CollectiveSample& sample) {
  const CollectiveAlgorithm& algorithm = collective_algorithm(sample.kind);
  // The α-β ring model of collective_cost() (Thakur, Rabenseifner & Gropp 2005): steps(n)·α + bus_factor(n)·S / B.
  const double transfer_s = fit.bus_bytes_per_s > 0 ? algorithm.bus_factor(sample.ranks) *
                                                           static_cast<double>(sample.message_bytes) /
                                                           fit.bus_bytes_per_s
                                                     : 0.0;
  const double slowed_s = (1.0 - 1.0 / fit.overlap_slowdown) * sample.compute_overlap_s;  // Note [Collective slowdown]
  return algorithm.latency_steps(sample.ranks) * fit.latency_s + transfer_s + slowed_s;
}

std::vector<CollectiveFit> fit_collectives(const std::vector<CollectiveSample>& samples,
                                           std::optional<double> progress_lost) {
  // std::map orders the cells by (kind, tier, ranks): a stable, readable order for tables and JSON.
  std::map<std::tuple<int, bool, int>, std::vector<CollectiveSample>> cells;
  for (const auto& sample : samples) {
    if (!usable_sample(sample)) continue;
    cells[{static_cast<int>(sample.kind), sample.spans_nodes, sample.ranks}].push_back(sample);
  }
  std::vector<CollectiveFit> fits;
  for (const auto& [key, cell] : cells) {
    fits.push_back({cell.front().kind, cell.front().ranks, cell.front().spans_nodes, fit_link(cell, progress_lost)});
  }
  return fits;
}

const CollectiveFit* find_collective_fit(const std::vector<CollectiveFit>& fits, const CollectiveSample& sample) {
  for (const auto& fit : fits) {
    if (fit.kind == sample.kind && fit.ranks == sample.ranks && fit.spans_nodes == sample.spans_nodes) return &fit;
  }
  return nullptr;
}

}  // namespace shardplan
