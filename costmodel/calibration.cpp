// Least-squares fits of link, compute and memory parameters to measured samples, and the calibrated profile.
#include "calibration.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include <Eigen/Dense>

#include "compute_cost.h"
#include "errors.h"
#include "input_limits.h"
#include "least_squares.h"

namespace shardplan {
namespace {

// Memory-bound work through the origin: t = work / R.
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
  // Positive samples give a positive rate; only durations no double divides meaningfully could not (the input's).
  if (!(seconds_per_unit(0) > 0) || !std::isfinite(seconds_per_unit(0))) {
    throw InputError("calibrate: the memory-bound samples do not determine a positive rate (check the trace's dur)");
  }
  fit.per_s = 1.0 / seconds_per_unit(0);
  const Residuals residuals = relative_residuals(design, seconds_per_unit, times);
  fit.rms_relative_residual = residuals.rms;
  fit.max_relative_residual = residuals.max;
  return fit;
}


// The columns of the compute fit (fit_compute_rate): which are in the design and where.
enum ComputeColumn { kGemmFlops, kGemmCount, kAttention, kMemoryBytes, kOverlap, kComputeColumns };

double column_value(ComputeColumn column, const ComputeSample& sample, bool attention_separate) {
  switch (column) {
    case kGemmFlops: return attention_separate ? sample.flops - sample.attention_flops : sample.flops;
    case kGemmCount: return sample.gemm_count;
    case kAttention: return sample.attention_flops;
    case kMemoryBytes: return sample.memory_bytes;
    case kOverlap: return sample.overlap_s;
    case kComputeColumns: break;
  }
  return 0.0;
}

}  // namespace

RateFit fit_compute_rate(const std::vector<ComputeSample>& samples) {
  std::vector<const ComputeSample*> usable;
  for (const auto& sample : samples) {
    if (sample.flops > 0 && sample.time_s > 0) usable.push_back(&sample);
  }
  RateFit fit;
  fit.samples = usable.size();
  if (usable.empty()) return fit;
  // t = GEMM FLOPs / R + GEMMs · f½ / R + attention / R_attention + (s − 1) · overlap (compute_cost.cpp's kernels;
  // simulator.cpp's stretch of the overlapped part). A column is in only when the samples can tell it: the overlap
  // when overlaps differ (a sweep has none: the slowdown is not seen there), attention when some ops have flash
  // attention and its share of their FLOPs differs. A coefficient that comes out negative is dropped and the rest
  // refitted (a fixed cost, a slowdown or a rate cannot be negative).
  double least_overlap = usable.front()->overlap_s, most_overlap = least_overlap;
  double least_share = 1, most_share = 0;
  std::size_t with_attention = 0;
  for (const auto* sample : usable) {
    least_overlap = std::min(least_overlap, sample->overlap_s);
    most_overlap = std::max(most_overlap, sample->overlap_s);
    const double share = sample->attention_flops / sample->flops;
    least_share = std::min(least_share, share);
    most_share = std::max(most_share, share);
    with_attention += sample->attention_flops > 0 ? 1 : 0;
  }
  std::size_t with_memory = 0;
  for (const auto* sample : usable) with_memory += sample->memory_bytes > 0 ? 1 : 0;
  std::array<bool, kComputeColumns> in{true, usable.size() >= 2, with_attention >= 2 && most_share > least_share + 1e-3,
                                       with_memory >= 2 && usable.size() >= 4,
                                       most_overlap > least_overlap && usable.size() >= 3};
  bool overlap_seen_free = false;
  Eigen::VectorXd x;
  std::vector<ComputeColumn> columns;
  for (int attempt = 0; attempt <= kComputeColumns; ++attempt) {
    columns.clear();
    for (int c = 0; c < kComputeColumns; ++c) {
      if (in[static_cast<std::size_t>(c)]) columns.push_back(static_cast<ComputeColumn>(c));
    }
    Eigen::MatrixXd design(static_cast<Eigen::Index>(usable.size()), static_cast<Eigen::Index>(columns.size()));
    Eigen::VectorXd times(static_cast<Eigen::Index>(usable.size()));
    for (std::size_t i = 0; i < usable.size(); ++i) {
      for (std::size_t c = 0; c < columns.size(); ++c) {
        design(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(c)) =
            column_value(columns[c], *usable[i], in[kAttention]);
      }
      times(static_cast<Eigen::Index>(i)) = usable[i]->time_s;
    }
    x = weighted_solve(design, times);
    // Drop the first column that came out negative (or a non-positive rate), most doubtful first; when the GEMM rate
    // itself comes out non-positive (too few or too alike samples to separate the columns), the first optional one.
    std::optional<ComputeColumn> drop;
    const bool rate_positive = x(0) > 0 && std::isfinite(x(0));
    for (ComputeColumn candidate : {kOverlap, kAttention, kMemoryBytes, kGemmCount}) {
      const auto at = std::find(columns.begin(), columns.end(), candidate);
      if (at == columns.end()) continue;
      const double value = x(static_cast<Eigen::Index>(at - columns.begin()));
      if (!rate_positive || value < 0 || ((candidate == kAttention || candidate == kMemoryBytes) && !(value > 0))) {
        drop = candidate;
        break;
      }
    }
    if (!drop) break;
    // Overlap made nothing slower: no slowdown column (s = 1). That is still a fitted s: the rate is fitted assuming
    // it, so a profile that kept the catalog's s > 1 would stretch overlapped ops a second time.
    if (*drop == kOverlap && rate_positive) overlap_seen_free = true;
    in[static_cast<std::size_t>(*drop)] = false;
  }
  if (!(x(0) > 0) || !std::isfinite(x(0))) {
    throw InputError("calibrate: the compute samples do not determine a positive rate (check the trace's dur)");
  }
  const auto coefficient = [&](ComputeColumn column) {
    const auto at = std::find(columns.begin(), columns.end(), column);
    return at == columns.end() ? 0.0 : x(static_cast<Eigen::Index>(at - columns.begin()));
  };
  fit.per_s = 1.0 / x(0);
  fit.half_efficiency_flops = coefficient(kGemmCount) * fit.per_s;
  fit.attention_per_s = in[kAttention] ? 1.0 / coefficient(kAttention) : 0.0;
  fit.memory_per_s = in[kMemoryBytes] ? 1.0 / coefficient(kMemoryBytes) : 0.0;
  if (in[kOverlap]) {
    fit.overlap_fitted = true;
    fit.overlap_slowdown = 1.0 + coefficient(kOverlap);
  } else if (overlap_seen_free) {
    fit.overlap_fitted = true;
    fit.overlap_slowdown = 1.0;
  }
  double squares = 0;
  for (const auto* sample : usable) {
    const double relative = (predicted_compute_s(fit, *sample) - sample->time_s) / sample->time_s;
    squares += relative * relative;
    fit.max_relative_residual = std::max(fit.max_relative_residual, std::abs(relative));
  }
  fit.rms_relative_residual = std::sqrt(squares / static_cast<double>(usable.size()));
  return fit;
}

ComputeSample compute_sample(const PassKernels& kernels, double time_s, const HardwareProfile& base) {
  ComputeSample sample;
  sample.time_s = time_s;
  double attention = 0;
  for (const AttentionCall& call : kernels.attention) attention += call.flops / attention_rate_share(call, base);
  sample.flops = kernels.gemm_flops() + attention;
  sample.attention_flops = attention;
  sample.gemm_count = static_cast<double>(kernels.gemms.size());
  sample.memory_bytes = kernels.memory_bytes;
  return sample;
}

double predicted_compute_s(const RateFit& fit, const ComputeSample& sample) {
  if (!(fit.per_s > 0)) return 0.0;
  const bool separate = fit.attention_per_s > 0;
  const double gemm_flops = separate ? sample.flops - sample.attention_flops : sample.flops;
  return (gemm_flops + sample.gemm_count * fit.half_efficiency_flops) / fit.per_s +
         (separate ? sample.attention_flops / fit.attention_per_s : 0.0) +
         (fit.memory_per_s > 0 ? sample.memory_bytes / fit.memory_per_s : 0.0) +
         (fit.overlap_slowdown - 1.0) * sample.overlap_s;
}

RateFit fit_memory_rate(const std::vector<MemorySample1D>& samples) {
  std::vector<std::pair<double, double>> pairs;
  for (const auto& sample : samples) pairs.emplace_back(sample.bytes, sample.time_s);
  return fit_rate(pairs);
}

double predicted_time_s(const RateFit& fit, double work, double overlap_s) {
  // t = (work + f½) / R + (s − 1) · overlap (fit_compute_rate's model; f½ = 0 for memory-bound work).
  return fit.per_s > 0 ? (work + fit.half_efficiency_flops) / fit.per_s + (fit.overlap_slowdown - 1.0) * overlap_s
                       : 0.0;
}

double fitted_efficiency(const RateFit& fit, double work) {
  // eff(f) = f / (f + f½) (HardwareProfile's curve, its maximum folded into the fitted rate).
  return work > 0 ? work / (work + fit.half_efficiency_flops) : 0.0;
}

IssueFit fit_issue_overhead(const std::vector<IssueGapSample>& samples) {
  IssueFit fit;
  fit.samples = samples.size();
  bool some_issue = false, some_without = false;
  for (const auto& sample : samples) (sample.collectives_issued > 0 ? some_issue : some_without) = true;
  if (!some_issue || !some_without) return fit;
  Eigen::MatrixXd design(static_cast<Eigen::Index>(samples.size()), 2);
  Eigen::VectorXd gaps(static_cast<Eigen::Index>(samples.size()));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    design(static_cast<Eigen::Index>(i), 0) = 1.0;
    design(static_cast<Eigen::Index>(i), 1) = samples[i].collectives_issued;
    gaps(static_cast<Eigen::Index>(i)) = samples[i].gap_s;
  }
  const Eigen::VectorXd x = design.colPivHouseholderQr().solve(gaps);
  fit.fitted = true;
  fit.per_gap_s = std::max(0.0, x(0));
  fit.per_collective_s = std::max(0.0, x(1));
  const Eigen::VectorXd residual = design * Eigen::Vector2d(fit.per_gap_s, fit.per_collective_s) - gaps;
  fit.rms_residual_s = std::sqrt(residual.squaredNorm() / static_cast<double>(samples.size()));
  return fit;
}

Calibration calibrate(const HardwareProfile& base, const CalibrationSamples& samples, const std::string& source) {
  Calibration calibration;
  calibration.samples = samples;
  HardwareProfile& profile = calibration.profile;
  profile = base;
  profile.source = source;
  // One collective slowdown for the profile (Note [Collective slowdown]): from the tier with more samples whose
  // overlaps tell it; both tiers and every cell are then fitted with it, so their α and B are the collectives' own.
  const LinkFit intra_free = fit_link(samples.intra_node), inter_free = fit_link(samples.inter_node);
  const LinkFit* slowdown_source = nullptr;
  for (const LinkFit* tier : {&intra_free, &inter_free}) {
    if (tier->overlap_fitted && (slowdown_source == nullptr || tier->samples > slowdown_source->samples)) {
      slowdown_source = tier;
    }
  }
  std::optional<double> progress_lost;
  if (slowdown_source != nullptr) {
    progress_lost = 1.0 - 1.0 / slowdown_source->overlap_slowdown;
    profile.overlap_collective_slowdown = slowdown_source->overlap_slowdown;
  }
  calibration.collective_slowdown_fitted = slowdown_source != nullptr;
  calibration.intra_node = fit_link(samples.intra_node, progress_lost);
  calibration.inter_node = fit_link(samples.inter_node, progress_lost);
  std::vector<CollectiveSample> all_collectives = samples.intra_node;
  all_collectives.insert(all_collectives.end(), samples.inter_node.begin(), samples.inter_node.end());
  calibration.collectives = fit_collectives(all_collectives, progress_lost);
  calibration.gemm = fit_compute_rate(samples.gemm);
  calibration.memory = fit_memory_rate(samples.memory);
  calibration.issue = fit_issue_overhead(samples.issue_gaps);
  if (calibration.issue.fitted) profile.collective_issue_overhead_s = calibration.issue.per_collective_s;
  // Fitted rates are what the kernels and collectives achieved: efficiencies 1, no small-size curve on top.
  // The fitted α is per ring step and B the busbw reached: NCCL's per-call latency, NVLS and the size curve are in them.
  if (calibration.intra_node.samples > 0 || calibration.inter_node.samples > 0) {
    profile.comm_half_efficiency_bytes = 1.0;  // one byte: the curve is flat at the sizes that occur
    profile.collective_base_latency_s = 0;
    profile.nvls_bus_bytes_per_s = 0;
  }
  if (calibration.intra_node.samples > 0) {
    profile.intra_node.latency_s = calibration.intra_node.latency_s;
    profile.intra_node.bus_bytes_per_s = calibration.intra_node.bus_bytes_per_s;
    profile.intra_node.efficiency = 1.0;
  }
  if (calibration.inter_node.samples > 0) {
    profile.inter_node.latency_s = calibration.inter_node.latency_s;
    profile.inter_node.bus_bytes_per_s = calibration.inter_node.bus_bytes_per_s;
    profile.inter_node.efficiency = 1.0;
  }
  if (calibration.memory.samples > 0) {
    profile.hbm_bytes_per_s = calibration.memory.per_s;
    profile.memory_efficiency = 1.0;
  }
  // Compute ops: their zero-fill runs at the (fitted) memory rate; the rest is GEMMs, attention and the memory-bound
  // kernels (compute_cost.h), what the compute fit sees — the last at a rate of their own, fitted from the passes.
  std::vector<ComputeSample> compute_samples;
  for (ComputeSample sample : samples.compute) {
    sample.time_s -= buffer_fill_time_s(sample.zeroed_bytes, profile);
    if (!(sample.time_s > 0)) continue;  // all fill (or noise): nothing left to fit the compute rate with
    compute_samples.push_back(sample);
  }
  calibration.compute = fit_compute_rate(compute_samples);
  if (calibration.compute.samples > 0) {
    // Fitted rates are what the kernels achieved: the peak becomes the fitted plateau, efficiencies and clock 1.
    profile.peak_bf16_flops = profile.peak_fp16_flops = profile.peak_fp32_flops = calibration.compute.per_s;
    profile.max_compute_efficiency = 1.0;
    profile.clock_fraction = 1.0;
    // At least one FLOP: the profile reader wants a positive size (a flat curve at every size that occurs).
    profile.half_efficiency_flops = std::max(1.0, calibration.compute.half_efficiency_flops);
    // Attention at its own fitted rate, or at the GEMMs' when the samples could not tell them apart.
    const double attention_rate =
        calibration.compute.attention_per_s > 0 ? calibration.compute.attention_per_s : calibration.compute.per_s;
    profile.attention_forward_efficiency = profile.attention_backward_efficiency =
        std::min(1.0, attention_rate / calibration.compute.per_s);
    // One fitted slowdown: the samples' passes mix every kernel kind, so it is each kind's (Note [Overlap slowdown by
    // kernel kind] in overlap_slowdown.h).
    if (calibration.compute.overlap_fitted) profile.set_overlap_slowdown(calibration.compute.overlap_slowdown);
    // Memory-bound kernels at their fitted rate; when the samples had them and their column was dropped, they cost
    // nothing measurable beside the GEMMs on this machine, as the fit assumed: the fastest rate a profile takes.
    const bool had_memory = std::any_of(compute_samples.begin(), compute_samples.end(),
                                        [](const ComputeSample& sample) { return sample.memory_bytes > 0; });
    if (calibration.compute.memory_per_s > 0) {
      profile.elementwise_bytes_per_s = calibration.compute.memory_per_s;
    } else if (had_memory) {
      profile.elementwise_bytes_per_s = limits::kBytesPerS.most;
    }
  }
  // Each collective × group size × tier with enough samples is timed by its own fit (HardwareProfile::CollectiveFit):
  // a reduce-scatter that also reduces, or an MPI stack that switches algorithms, is not the pooled tier.
  profile.collective_fits.clear();
  for (const CollectiveFit& cell : calibration.collectives) {
    if (cell.fit.samples < 2 || !(cell.fit.bus_bytes_per_s > 0)) continue;
    profile.collective_fits.push_back(
        {to_string(cell.kind), cell.ranks, cell.spans_nodes, cell.fit.latency_s, cell.fit.bus_bytes_per_s});
  }
  if (samples.measured_peak_bytes > 0) {
    profile.context_overhead_bytes = std::max<std::int64_t>(0, samples.measured_peak_bytes - samples.predicted_peak_bytes);
  }
  return calibration;
}

}  // namespace shardplan
