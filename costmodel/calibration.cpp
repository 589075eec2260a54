// Least-squares fits of link, compute and memory parameters to measured samples, and the calibrated profile.
#include "calibration.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

#include "errors.h"

namespace shardplan {
namespace {

// Weighted least squares: minimise Σ (w_i (a_i · x − t_i))² with w_i = 1 / t_i, so every sample's relative error
// counts the same whatever its size (Björck, Numerical Methods for Least Squares Problems, §4.1).
Eigen::VectorXd weighted_solve(const Eigen::MatrixXd& design, const Eigen::VectorXd& times) {
  Eigen::MatrixXd a = design;
  Eigen::VectorXd b = times;
  for (Eigen::Index row = 0; row < a.rows(); ++row) {
    const double weight = 1.0 / std::max(times(row), 1e-12);
    a.row(row) *= weight;
    b(row) *= weight;
  }
  return a.colPivHouseholderQr().solve(b);
}

double rms_relative(const Eigen::MatrixXd& design, const Eigen::VectorXd& x, const Eigen::VectorXd& times) {
  double sum = 0;
  for (Eigen::Index row = 0; row < design.rows(); ++row) {
    const double predicted = design.row(row).dot(x);
    const double relative = (predicted - times(row)) / std::max(times(row), 1e-12);
    sum += relative * relative;
  }
  return design.rows() > 0 ? std::sqrt(sum / static_cast<double>(design.rows())) : 0.0;
}

RateFit fit_rate(const std::vector<std::pair<double, double>>& work_and_time) {
  RateFit fit;
  std::vector<std::pair<double, double>> usable;
  for (const auto& sample : work_and_time) {
    if (sample.first > 0 && sample.second > 0) usable.push_back(sample);
  }
  fit.samples = usable.size();
  if (usable.empty()) return fit;
  Eigen::MatrixXd design(static_cast<Eigen::Index>(usable.size()), 1);
  Eigen::VectorXd times(static_cast<Eigen::Index>(usable.size()));
  for (std::size_t i = 0; i < usable.size(); ++i) {
    design(static_cast<Eigen::Index>(i), 0) = usable[i].first;
    times(static_cast<Eigen::Index>(i)) = usable[i].second;
  }
  const Eigen::VectorXd seconds_per_unit = weighted_solve(design, times);
  SHARDPLAN_CHECK(seconds_per_unit(0) > 0, "a fitted rate must be positive");
  fit.per_s = 1.0 / seconds_per_unit(0);
  fit.rms_relative_residual = rms_relative(design, seconds_per_unit, times);
  return fit;
}

}  // namespace

LinkFit fit_link(const std::vector<CollectiveSample>& samples) {
  LinkFit fit;
  std::vector<const CollectiveSample*> usable;
  for (const auto& sample : samples) {
    if (sample.ranks > 1 && sample.time_s > 0) usable.push_back(&sample);
  }
  fit.samples = usable.size();
  if (usable.empty()) return fit;
  // Columns: ring steps (× α) and bus_factor(n)·S (× 1/B), as collective_cost() models a collective.
  Eigen::MatrixXd design(static_cast<Eigen::Index>(usable.size()), 2);
  Eigen::VectorXd times(static_cast<Eigen::Index>(usable.size()));
  for (std::size_t i = 0; i < usable.size(); ++i) {
    const CollectiveAlgorithm& algorithm = collective_algorithm(usable[i]->kind);
    const auto row = static_cast<Eigen::Index>(i);
    design(row, 0) = algorithm.latency_steps(usable[i]->ranks);
    design(row, 1) = algorithm.bus_factor(usable[i]->ranks) * static_cast<double>(usable[i]->message_bytes);
    times(row) = usable[i]->time_s;
  }
  Eigen::VectorXd x = weighted_solve(design, times);
  if (x(0) < 0 || usable.size() < 2) {
    // No latency to be seen (or too few samples for two unknowns): fit bandwidth alone through the origin.
    x(0) = 0;
    const Eigen::VectorXd slope = weighted_solve(design.col(1), times);
    x(1) = slope(0);
  }
  SHARDPLAN_CHECK(x(1) > 0, "a fitted bandwidth must be positive");
  fit.latency_s = x(0);
  fit.bus_bytes_per_s = 1.0 / x(1);
  fit.rms_relative_residual = rms_relative(design, x, times);
  return fit;
}

RateFit fit_compute_rate(const std::vector<ComputeSample>& samples) {
  std::vector<const ComputeSample*> usable;
  for (const auto& sample : samples) {
    if (sample.flops > 0 && sample.time_s > 0) usable.push_back(&sample);
  }
  RateFit fit;
  fit.samples = usable.size();
  if (usable.empty()) return fit;
  // Columns: flops (× 1/R) and 1 (× f½/R).
  Eigen::MatrixXd design(static_cast<Eigen::Index>(usable.size()), 2);
  Eigen::VectorXd times(static_cast<Eigen::Index>(usable.size()));
  for (std::size_t i = 0; i < usable.size(); ++i) {
    design(static_cast<Eigen::Index>(i), 0) = usable[i]->flops;
    design(static_cast<Eigen::Index>(i), 1) = 1.0;
    times(static_cast<Eigen::Index>(i)) = usable[i]->time_s;
  }
  Eigen::VectorXd x = weighted_solve(design, times);
  if (x(1) < 0 || x(0) <= 0 || usable.size() < 2) {
    // No fixed cost visible (or too few samples): the rate alone, through the origin.
    x(1) = 0;
    x(0) = weighted_solve(design.col(0), times)(0);
  }
  SHARDPLAN_CHECK(x(0) > 0, "a fitted compute rate must be positive");
  fit.per_s = 1.0 / x(0);
  fit.half_efficiency_flops = x(1) * fit.per_s;
  fit.rms_relative_residual = rms_relative(design, x, times);
  return fit;
}

RateFit fit_memory_rate(const std::vector<MemorySample1D>& samples) {
  std::vector<std::pair<double, double>> pairs;
  for (const auto& sample : samples) pairs.emplace_back(sample.bytes, sample.time_s);
  return fit_rate(pairs);
}

Calibration calibrate(const HardwareProfile& base, const CalibrationSamples& samples, const std::string& source) {
  Calibration calibration;
  HardwareProfile& profile = calibration.profile;
  profile = base;
  profile.source = source;
  calibration.intra_node = fit_link(samples.intra_node);
  calibration.inter_node = fit_link(samples.inter_node);
  calibration.compute = fit_compute_rate(samples.compute);
  calibration.memory = fit_memory_rate(samples.memory);
  // Fitted rates are what the kernels and collectives achieved: efficiencies 1, no small-size curve on top.
  if (calibration.intra_node.samples > 0 || calibration.inter_node.samples > 0) {
    profile.bus_efficiency = 1.0;
    profile.comm_half_efficiency_bytes = 1.0;  // one byte: the curve is flat at the sizes that occur
  }
  if (calibration.intra_node.samples > 0) {
    profile.intra_node.latency_s = calibration.intra_node.latency_s;
    profile.intra_node.bus_bytes_per_s = calibration.intra_node.bus_bytes_per_s;
  }
  if (calibration.inter_node.samples > 0) {
    profile.inter_node.latency_s = calibration.inter_node.latency_s;
    profile.inter_node.bus_bytes_per_s = calibration.inter_node.bus_bytes_per_s;
  }
  if (calibration.compute.samples > 0) {
    profile.peak_bf16_flops = profile.peak_fp16_flops = profile.peak_fp32_flops = calibration.compute.per_s;
    profile.max_compute_efficiency = 1.0;
    // At least one FLOP: the profile reader wants a positive size (a flat curve at every size that occurs).
    profile.half_efficiency_flops = std::max(1.0, calibration.compute.half_efficiency_flops);
  }
  if (calibration.memory.samples > 0) {
    profile.hbm_bytes_per_s = calibration.memory.per_s;
    profile.memory_efficiency = 1.0;
  }
  if (samples.measured_peak_bytes > 0) {
    profile.context_overhead_bytes = std::max<std::int64_t>(0, samples.measured_peak_bytes - samples.predicted_peak_bytes);
  }
  return calibration;
}

nlohmann::json to_json(const Calibration& calibration, const std::string& machine, const std::string& date) {
  nlohmann::json document = to_json(calibration.profile);
  const auto link = [](const LinkFit& fit) {
    return nlohmann::json{{"latency_s", fit.latency_s}, {"bus_bytes_per_s", fit.bus_bytes_per_s},
                          {"rms_relative_residual", fit.rms_relative_residual}, {"samples", fit.samples}};
  };
  const auto rate = [](const RateFit& fit) {
    return nlohmann::json{{"per_s", fit.per_s}, {"rms_relative_residual", fit.rms_relative_residual},
                          {"samples", fit.samples}};
  };
  document["fits"] = {{"intra_node", link(calibration.intra_node)},
                      {"inter_node", link(calibration.inter_node)},
                      {"compute", rate(calibration.compute)},
                      {"memory", rate(calibration.memory)}};
  document["machine"] = machine;
  document["date"] = date;
  return document;
}

}  // namespace shardplan
