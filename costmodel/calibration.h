// Calibration: fitting the cost model's parameters (α, β per link tier; compute and memory rates) to measured samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collective_cost.h"
#include "hardware_profile.h"

namespace shardplan {

struct CollectiveSample {
  CollectiveKind kind = CollectiveKind::all_gather;
  int ranks = 2;
  bool spans_nodes = false;
  std::int64_t message_bytes = 0;  // S as nccl-tests defines it
  double time_s = 0;
};

struct ComputeSample {
  double flops = 0;
  double time_s = 0;
};

struct MemorySample1D {  // memory-bound work (the optimizer step)
  double bytes = 0;
  double time_s = 0;
};

// t = α · steps(n) + bus_factor(n) · S / B, fitted by weighted least squares (weights 1/t: relative errors count
// equally; Eigen's column-pivoting QR). α and B come back with the relative RMS residual.
struct LinkFit {
  double latency_s = 0;
  double bus_bytes_per_s = 0;
  double rms_relative_residual = 0;
  std::size_t samples = 0;
};
LinkFit fit_link(const std::vector<CollectiveSample>& samples);

// Memory-bound work: t = bytes / R (through the origin, weights 1/t). Compute: t = (flops + f½) / R, which is the cost
// model's efficiency curve flops / (R · flops / (flops + f½)) with full efficiency at large sizes — linear in flops,
// so R and the half-efficiency size f½ come out of one least-squares fit.
struct RateFit {
  double per_s = 0;                  // FLOP/s, or bytes/s for memory-bound work
  double half_efficiency_flops = 0;  // compute only: f½
  double rms_relative_residual = 0;
  std::size_t samples = 0;
};
RateFit fit_compute_rate(const std::vector<ComputeSample>& samples);
RateFit fit_memory_rate(const std::vector<MemorySample1D>& samples);

struct CalibrationSamples {
  std::vector<CollectiveSample> intra_node, inter_node;
  std::vector<ComputeSample> compute;
  std::vector<MemorySample1D> memory;
  std::int64_t measured_peak_bytes = 0;    // the tracked peak of the runs
  std::int64_t predicted_peak_bytes = 0;   // the schedule's peak without the overhead term
};

struct Calibration {
  HardwareProfile profile;
  LinkFit intra_node, inter_node;
  RateFit compute, memory;
};

// Replaces the fitted parameters of `base` (those with enough samples; others keep their values). Fitted rates are
// effective rates, so efficiencies become 1 and the small-size curves flat; the overhead becomes the measured peak
// minus the schedule's peak without it (never negative).
Calibration calibrate(const HardwareProfile& base, const CalibrationSamples& samples, const std::string& source);

// `shardplan.profile/v1` with the fits' residuals and sample counts (the keys apply_profile_json reserves).
nlohmann::json to_json(const Calibration& calibration, const std::string& machine, const std::string& date);

}  // namespace shardplan
