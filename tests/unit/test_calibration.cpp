// Tests of calibration: least-squares fits recover known α, β (pooled and per collective × group size × tier),
// compute rates with efficiency by op size, the slowdowns beside overlap and memory rates from noisy synthetic samples;
// the profile JSON round-trips.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "calibration.h"
#include "cluster.h"
#include "compute_cost.h"

using namespace shardplan;

namespace {

// Deterministic ±`amplitude` relative noise.
struct Noise {
  std::mt19937 generator{20261129};
  double operator()(double amplitude) {
    return 1.0 + amplitude * (2.0 * std::uniform_real_distribution<double>(0.0, 1.0)(generator) - 1.0);
  }
};

// The α-β ring model the fits assume (collective_cost.h): steps(n)·α + bus_factor(n)·S / B.
double ring_time_s(CollectiveKind kind, int ranks, std::int64_t bytes, double alpha_s, double bus_bytes_per_s) {
  const CollectiveAlgorithm& algorithm = collective_algorithm(kind);
  return algorithm.latency_steps(ranks) * alpha_s +
         algorithm.bus_factor(ranks) * static_cast<double>(bytes) / bus_bytes_per_s;
}

// The known parameters of one (collective, group size, tier) cell.
struct Cell {
  CollectiveKind kind;
  int ranks;
  bool spans_nodes;
  double alpha_s;
  double bus_bytes_per_s;
};

}  // namespace

TEST_CASE("calibration: α and β recovered from noisy ring-collective samples") {
  const double alpha_s = 5e-6, bus_bytes_per_s = 2e10;
  Noise noise;
  std::vector<CollectiveSample> samples;
  for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce}) {
    for (int ranks : {2, 4, 8}) {
      for (std::int64_t bytes = 1024; bytes <= (std::int64_t{64} << 20); bytes *= 4) {
        const double time = ring_time_s(kind, ranks, bytes, alpha_s, bus_bytes_per_s);
        samples.push_back({kind, ranks, false, bytes, time * noise(0.01)});
      }
    }
  }
  const LinkFit fit = fit_link(samples);
  CHECK(fit.samples == samples.size());
  CHECK(fit.latency_s == doctest::Approx(alpha_s).epsilon(0.05));
  CHECK(fit.bus_bytes_per_s == doctest::Approx(bus_bytes_per_s).epsilon(0.02));
  CHECK(fit.rms_relative_residual < 0.01);
  CHECK(fit.max_relative_residual < 0.025);
  CHECK(fit.max_relative_residual >= fit.rms_relative_residual);
}

TEST_CASE("calibration: each collective × group size × tier gets its own α and β back, with residuals") {
  // Different known values in every cell, as MPI's algorithm choice by size and rank count makes them; the
  // node-spanning cells are slower (a NIC instead of shared memory).
  const std::vector<Cell> cells = {
      {CollectiveKind::all_gather, 2, false, 3e-6, 8e9},     {CollectiveKind::all_gather, 4, false, 6e-6, 5e9},
      {CollectiveKind::reduce_scatter, 2, false, 4e-6, 6e9}, {CollectiveKind::reduce_scatter, 4, false, 2e-6, 4e9},
      {CollectiveKind::all_reduce, 2, false, 8e-6, 3e9},     {CollectiveKind::all_reduce, 4, false, 1e-5, 2.5e9},
      {CollectiveKind::all_gather, 4, true, 2e-5, 1.2e9},    {CollectiveKind::all_reduce, 4, true, 3e-5, 1e9},
  };
  Noise noise;
  std::vector<CollectiveSample> samples;
  for (const Cell& cell : cells) {
    for (std::int64_t bytes = 1024; bytes <= (std::int64_t{16} << 20); bytes *= 2) {
      const double time = ring_time_s(cell.kind, cell.ranks, bytes, cell.alpha_s, cell.bus_bytes_per_s);
      samples.push_back({cell.kind, cell.ranks, cell.spans_nodes, bytes, time * noise(0.02)});
    }
  }
  // A one-rank sample (no collective happens) is not a cell.
  samples.push_back({CollectiveKind::all_reduce, 1, false, 4096, 1e-7});
  const std::vector<CollectiveFit> fits = fit_collectives(samples);
  REQUIRE(fits.size() == cells.size());
  for (const Cell& cell : cells) {
    const CollectiveFit* fit = find_collective_fit(fits, {cell.kind, cell.ranks, cell.spans_nodes, 0, 0});
    REQUIRE(fit != nullptr);
    INFO(to_string(cell.kind) << " ranks " << cell.ranks << (cell.spans_nodes ? " inter" : " intra"));
    CHECK(fit->fit.samples == 15);
    CHECK(fit->fit.latency_s == doctest::Approx(cell.alpha_s).epsilon(0.06));
    CHECK(fit->fit.bus_bytes_per_s == doctest::Approx(cell.bus_bytes_per_s).epsilon(0.03));
    // ±2% noise: residuals of the right fit stay within it.
    CHECK(fit->fit.rms_relative_residual < 0.02);
    CHECK(fit->fit.max_relative_residual < 0.04);
  }
  // Ordered by kind, then tier, then ranks.
  CHECK(fits.front().kind == CollectiveKind::all_gather);
  CHECK(fits.front().ranks == 2);
  CHECK(fits[2].spans_nodes);
  CHECK(fits.back().kind == CollectiveKind::all_reduce);
  // The fitted model reproduces a noiseless sample.
  const CollectiveFit* ag2 = find_collective_fit(fits, {CollectiveKind::all_gather, 2, false, 0, 0});
  const CollectiveSample exact{CollectiveKind::all_gather, 2, false, 1 << 20,
                               ring_time_s(CollectiveKind::all_gather, 2, 1 << 20, 3e-6, 8e9)};
  CHECK(predicted_time_s(ag2->fit, exact) == doctest::Approx(exact.time_s).epsilon(0.03));
}

TEST_CASE("calibration: a pure-bandwidth cell fits through the origin, and a bad fit shows in its residuals") {
  std::vector<CollectiveSample> samples;
  for (std::int64_t bytes = 4096; bytes <= (std::int64_t{1} << 24); bytes *= 4) {
    samples.push_back({CollectiveKind::reduce_scatter, 2, false, bytes, 0.5 * static_cast<double>(bytes) / 5e9});
  }
  const LinkFit clean = fit_link(samples);
  CHECK(clean.latency_s == doctest::Approx(0).epsilon(1e-9));
  CHECK(clean.bus_bytes_per_s == doctest::Approx(5e9).epsilon(1e-6));
  CHECK(clean.max_relative_residual < 1e-9);
  samples[3].time_s *= 1.5;  // one sample 50% slow (a noisy neighbour)
  const LinkFit disturbed = fit_link(samples);
  CHECK(disturbed.max_relative_residual > 0.15);
  CHECK(disturbed.max_relative_residual > disturbed.rms_relative_residual);
}

TEST_CASE("calibration: the GEMM curve — plateau rate and fixed cost per GEMM recovered from the compute model") {
  // Samples generated by the cost model's own gemm_time_s ((F + f½) / (peak × E × clock), compute_cost.h) for a known
  // profile, plus noise: the fit must give back R = peak × E × clock and f½.
  const Cluster cluster = parse_cluster("1xcpu", HardwareCatalog::builtin());
  HardwareProfile truth = profile_from_cluster(cluster);
  truth.peak_fp32_flops = 2e11;
  truth.max_compute_efficiency = 0.6;
  truth.half_efficiency_flops = 5e7;
  Noise noise;
  std::vector<ComputeSample> samples;
  for (std::int64_t n = 80; n <= 4000; n = n * 3 / 2) {
    const GemmCall gemm{n, n, n, 1};
    samples.push_back({gemm.flops(), gemm_time_s(gemm, 4, truth) * noise(0.03), "synthetic"});
  }
  const RateFit fit = fit_compute_rate(samples);
  CHECK(fit.samples == samples.size());
  CHECK(fit.per_s == doctest::Approx(truth.peak_fp32_flops * truth.max_compute_efficiency).epsilon(0.03));
  CHECK(fit.half_efficiency_flops == doctest::Approx(truth.half_efficiency_flops).epsilon(0.08));
  CHECK(fit.rms_relative_residual < 0.03);
  // The fitted curve is the model's curve without its maximum: eff(f½) = 1/2, and it saturates.
  CHECK(fitted_efficiency(fit, fit.half_efficiency_flops) == doctest::Approx(0.5));
  CHECK(fitted_efficiency(fit, 1e12) > 0.99);
  const GemmCall billion{1000, 1000, 500, 1};  // 1e9 FLOPs
  CHECK(predicted_time_s(fit, 1e9) == doctest::Approx(gemm_time_s(billion, 4, truth)).epsilon(0.03));
  // A calibrated profile predicts the same GEMM times through gemm_time_s.
  CalibrationSamples calibration_samples;
  calibration_samples.compute = samples;
  const Calibration calibration = calibrate(profile_from_cluster(cluster), calibration_samples, "test");
  for (std::int64_t n : {100, 700, 3000}) {
    const GemmCall gemm{n, n, n, 1};
    CHECK(gemm_time_s(gemm, 4, calibration.profile) == doctest::Approx(gemm_time_s(gemm, 4, truth)).epsilon(0.04));
  }
}

TEST_CASE("calibration: flash attention's own rate is separated from the GEMMs' when the samples tell them apart") {
  // Ops mixing GEMMs and attention in different proportions (long and short sequences): t = (G + n·f½)/R + A/R_a.
  const double rate = 3e14, half = 2e9, attention_rate = 1e14;
  Noise noise;
  std::vector<ComputeSample> samples;
  for (int i = 0; i < 12; ++i) {
    ComputeSample sample;
    const double gemm_flops = 1e11 * (1 + i % 4), attention = 2e10 * (i % 5);
    sample.gemm_count = 4 + i % 3;
    sample.flops = gemm_flops + attention;
    sample.attention_flops = attention;
    sample.time_s = ((gemm_flops + sample.gemm_count * half) / rate + attention / attention_rate) * noise(0.01);
    samples.push_back(sample);
  }
  const RateFit fit = fit_compute_rate(samples);
  CHECK(fit.per_s == doctest::Approx(rate).epsilon(0.03));
  CHECK(fit.attention_per_s == doctest::Approx(attention_rate).epsilon(0.05));
  CHECK(fit.rms_relative_residual < 0.02);
  // Without attention in the samples there is nothing to separate: one rate.
  for (auto& sample : samples) {
    sample.flops -= sample.attention_flops;
    sample.attention_flops = 0;
  }
  CHECK(fit_compute_rate(samples).attention_per_s == 0);
}

TEST_CASE("calibration: the layer passes' memory-bound bytes get their own rate, which the profile then uses") {
  // Passes of different kinds: GEMM-heavy blocks, GEMM-free norms and embeddings (t = (G + n·f½)/R + M/R_m).
  const double rate = 3e10, memory_rate = 5e9;
  Noise noise;
  std::vector<ComputeSample> samples;
  for (int i = 0; i < 12; ++i) {
    ComputeSample sample;
    sample.flops = (i % 3 == 0) ? 1.0 : 2e7 * (1 + i % 4);  // a norm does no GEMM (one FLOP keeps it a sample)
    sample.gemm_count = (i % 3 == 0) ? 0 : 7;
    sample.memory_bytes = 1e6 * (1 + i % 5);
    sample.time_s = (sample.flops / rate + sample.memory_bytes / memory_rate) * noise(0.01);
    samples.push_back(sample);
  }
  const RateFit fit = fit_compute_rate(samples);
  CHECK(fit.per_s == doctest::Approx(rate).epsilon(0.05));
  CHECK(fit.memory_per_s == doctest::Approx(memory_rate).epsilon(0.05));
  CalibrationSamples calibration_samples;
  calibration_samples.compute = samples;
  const Cluster cluster = parse_cluster("1xcpu", HardwareCatalog::builtin());
  const Calibration calibration = calibrate(profile_from_cluster(cluster), calibration_samples, "test");
  CHECK(calibration.profile.elementwise_bytes_per_s == doctest::Approx(fit.memory_per_s));
  CHECK(elementwise_time_s(1e6, calibration.profile) == doctest::Approx(1e6 / memory_rate).epsilon(0.05));
}

TEST_CASE("calibration: the overlap slowdown is recovered from ops that overlap collectives by different amounts") {
  // Ops of several sizes, each run alone and with a collective in flight for part of it: t = (f + f½)/R + (s − 1)·o.
  Noise noise;
  const double rate = 4e10, half = 2e7, slowdown = 1.35;
  std::vector<ComputeSample> samples;
  for (double flops = 1e7; flops <= 1e10; flops *= 2.2) {
    const double base_s = (flops + half) / rate;
    for (double fraction : {0.0, 0.4, 1.0}) {
      const double overlap_s = fraction * base_s;
      samples.push_back({flops, (base_s + (slowdown - 1.0) * overlap_s) * noise(0.01), "synthetic", overlap_s});
    }
  }
  const RateFit fit = fit_compute_rate(samples);
  REQUIRE(fit.overlap_fitted);
  CHECK(fit.overlap_slowdown == doctest::Approx(slowdown).epsilon(0.02));
  CHECK(fit.per_s == doctest::Approx(rate).epsilon(0.02));
  CHECK(fit.half_efficiency_flops == doctest::Approx(half).epsilon(0.1));
  CalibrationSamples calibration_samples;
  calibration_samples.compute = samples;
  const Calibration calibration = calibrate(profile_from_cluster(parse_cluster("1xcpu", HardwareCatalog::builtin())),
                                            calibration_samples, "test");
  CHECK(calibration.profile.overlap_compute_slowdown == doctest::Approx(slowdown).epsilon(0.02));
  // Without overlaps that differ (a sweep) the slowdown is not fitted and the profile keeps its value.
  for (auto& sample : samples) sample.overlap_s = 0;
  CHECK_FALSE(fit_compute_rate(samples).overlap_fitted);
  // Overlap that makes nothing slower gives no slowdown column (s = 1), not a speed-up.
  std::vector<ComputeSample> unaffected;
  for (double flops = 1e7; flops <= 1e10; flops *= 2.2) {
    for (double fraction : {0.0, 0.5, 1.0}) {
      unaffected.push_back({flops, (flops + half) / rate * (1.0 - 0.05 * fraction), "synthetic", fraction * flops / rate});
    }
  }
  const RateFit unaffected_fit = fit_compute_rate(unaffected);
  CHECK(unaffected_fit.overlap_slowdown == 1.0);
  // ... and the profile says so: its rate was fitted with s = 1, so keeping the catalog's s would count overlap twice.
  CHECK(unaffected_fit.overlap_fitted);
  calibration_samples.compute = unaffected;
  const HardwareProfile catalog = profile_from_cluster(parse_cluster("1xcpu", HardwareCatalog::builtin()));
  REQUIRE(catalog.overlap_compute_slowdown > 1.0);
  CHECK(calibrate(catalog, calibration_samples, "test").profile.overlap_compute_slowdown == 1.0);
}

TEST_CASE("calibration: collectives slowed beside compute give their own α, B and the slowdown back") {
  // Note [Collective slowdown]: own time at rate 1 / s while the rank computes. A collective that had compute beside
  // it for a fraction f of its measured time t does own = t (1 − f (1 − 1/s)), so t = own / (1 − f (1 − 1/s)).
  const double alpha_s = 10e-6, bus_bytes_per_s = 4e9, slowdown = 3.0;
  Noise noise;
  std::vector<CollectiveSample> samples;
  for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
    for (std::int64_t bytes = 4096; bytes <= (std::int64_t{16} << 20); bytes *= 4) {
      for (double fraction : {0.0, 0.3, 0.7, 1.0}) {
        const double own_s = ring_time_s(kind, 2, bytes, alpha_s, bus_bytes_per_s);
        const double time_s = own_s / (1.0 - fraction * (1.0 - 1.0 / slowdown)) * noise(0.01);
        samples.push_back({kind, 2, false, bytes, time_s, fraction * time_s});
      }
    }
  }
  const LinkFit fit = fit_link(samples);
  REQUIRE(fit.overlap_fitted);
  CHECK(fit.overlap_slowdown == doctest::Approx(slowdown).epsilon(0.03));
  CHECK(fit.latency_s == doctest::Approx(alpha_s).epsilon(0.1));
  CHECK(fit.bus_bytes_per_s == doctest::Approx(bus_bytes_per_s).epsilon(0.02));
  CHECK(fit.rms_relative_residual < 0.02);
  // Ignoring the overlap, the same samples look like a slower link with large residuals.
  std::vector<CollectiveSample> blind = samples;
  for (auto& sample : blind) sample.compute_overlap_s = 0;
  const LinkFit blind_fit = fit_link(blind);
  CHECK_FALSE(blind_fit.overlap_fitted);
  CHECK(blind_fit.bus_bytes_per_s < 0.8 * bus_bytes_per_s);
  CHECK(blind_fit.rms_relative_residual > 0.2);
  // The profile takes the slowdown, and the tiers and cells are fitted with it.
  CalibrationSamples calibration_samples;
  calibration_samples.intra_node = samples;
  const Calibration calibration = calibrate(profile_from_cluster(parse_cluster("2xcpu", HardwareCatalog::builtin())),
                                            calibration_samples, "test");
  CHECK(calibration.collective_slowdown_fitted);
  CHECK(calibration.profile.overlap_collective_slowdown == doctest::Approx(slowdown).epsilon(0.03));
  CHECK(calibration.profile.intra_node.bus_bytes_per_s == doctest::Approx(bus_bytes_per_s).epsilon(0.02));
  for (const CollectiveFit& cell : calibration.collectives) {
    CHECK(cell.fit.overlap_slowdown == doctest::Approx(calibration.profile.overlap_collective_slowdown));
    CHECK(cell.fit.bus_bytes_per_s == doctest::Approx(bus_bytes_per_s).epsilon(0.03));
  }
}

TEST_CASE("calibration: α is fitted only where the message sizes span enough to tell it from bandwidth") {
  // A trace's per-unit collectives come in a few sizes close together (plan A: 263 and 738 KB): there a latency and
  // a bandwidth trade against each other, and the fit keeps bandwidth alone.
  const double bus_bytes_per_s = 2e9;
  Noise noise;
  std::vector<CollectiveSample> samples;
  for (std::int64_t bytes : {std::int64_t{262656}, std::int64_t{738304}}) {
    for (int repeat = 0; repeat < 10; ++repeat) {
      const double time_s = ring_time_s(CollectiveKind::all_gather, 2, bytes, 0.0, bus_bytes_per_s) * noise(0.2);
      samples.push_back({CollectiveKind::all_gather, 2, false, bytes, time_s});
    }
  }
  const LinkFit fit = fit_link(samples);
  CHECK(fit.latency_s == 0.0);
  CHECK(fit.bus_bytes_per_s == doctest::Approx(bus_bytes_per_s).epsilon(0.1));
}

TEST_CASE("calibration: the collective issue overhead is recovered from gaps between compute ops") {
  // gap = c + o · collectives issued, with ±20 µs of absolute noise (gaps are small absolute times).
  std::mt19937 generator(7);
  std::uniform_real_distribution<double> jitter(-20e-6, 20e-6);
  const double per_gap_s = 10e-6, per_collective_s = 180e-6;
  std::vector<IssueGapSample> gaps;
  for (int i = 0; i < 200; ++i) {
    const int issued = i % 3;  // 0, 1 or 2 collectives in the gap
    gaps.push_back({issued, std::max(0.0, per_gap_s + issued * per_collective_s + jitter(generator))});
  }
  const IssueFit fit = fit_issue_overhead(gaps);
  REQUIRE(fit.fitted);
  CHECK(fit.per_collective_s == doctest::Approx(per_collective_s).epsilon(0.05));
  CHECK(fit.per_gap_s == doctest::Approx(per_gap_s).epsilon(0.5));
  CHECK(fit.rms_residual_s < 20e-6);
  CalibrationSamples samples;
  samples.issue_gaps = gaps;
  const Calibration calibration =
      calibrate(profile_from_cluster(parse_cluster("2xcpu", HardwareCatalog::builtin())), samples, "test");
  CHECK(calibration.profile.collective_issue_overhead_s == doctest::Approx(per_collective_s).epsilon(0.05));
  // Without gaps of both kinds the two terms cannot be told apart: nothing is fitted and the profile keeps its value.
  std::vector<IssueGapSample> only_issuing;
  for (const auto& gap : gaps) {
    if (gap.collectives_issued > 0) only_issuing.push_back(gap);
  }
  CHECK_FALSE(fit_issue_overhead(only_issuing).fitted);
  // Issuing that costs nothing measurable fits 0, never a negative overhead.
  std::vector<IssueGapSample> free_issue;
  for (int i = 0; i < 40; ++i) free_issue.push_back({i % 2, i % 2 == 1 ? 5e-6 : 15e-6});
  CHECK(fit_issue_overhead(free_issue).per_collective_s == 0.0);
}

TEST_CASE("calibration: compute and memory rates recovered; the profile takes the fitted values") {
  Noise noise;
  CalibrationSamples samples;
  // Compute with a fixed cost per op: t = (flops + 2e9) / 3e12.
  for (double flops = 1e9; flops <= 1e12; flops *= 3) {
    samples.compute.push_back({flops, (flops + 2e9) / 3e12 * noise(0.02)});
  }
  // GEMMs: fitted and reported, not applied.
  for (double flops = 1e6; flops <= 1e10; flops *= 4) samples.gemm.push_back({flops, (flops + 1e6) / 9e12});
  for (double bytes = 1e6; bytes <= 1e9; bytes *= 5) samples.memory.push_back({bytes, bytes / 1.5e12 * noise(0.02)});
  for (std::int64_t bytes = 4096; bytes <= (std::int64_t{16} << 20); bytes *= 8) {
    samples.intra_node.push_back({CollectiveKind::all_gather, 2, false, bytes, 1e-5 + 0.5 * bytes / 4e9});
  }
  samples.measured_peak_bytes = 1'000'000;
  samples.predicted_peak_bytes = 900'000;
  const Cluster cluster = parse_cluster("2xcpu", HardwareCatalog::builtin());
  const Calibration calibration = calibrate(profile_from_cluster(cluster), samples, "test");
  CHECK(calibration.compute.per_s == doctest::Approx(3e12).epsilon(0.03));
  CHECK(calibration.compute.half_efficiency_flops == doctest::Approx(2e9).epsilon(0.1));
  CHECK(calibration.profile.half_efficiency_flops == doctest::Approx(calibration.compute.half_efficiency_flops));
  CHECK(calibration.gemm.per_s == doctest::Approx(9e12).epsilon(1e-6));
  CHECK(calibration.gemm.half_efficiency_flops == doctest::Approx(1e6).epsilon(1e-6));
  CHECK(calibration.memory.per_s == doctest::Approx(1.5e12).epsilon(0.02));
  CHECK(calibration.profile.peak_fp32_flops == doctest::Approx(calibration.compute.per_s));
  CHECK(calibration.profile.intra_node.bus_bytes_per_s == doctest::Approx(4e9).epsilon(1e-6));
  CHECK(calibration.profile.intra_node.latency_s == doctest::Approx(1e-5).epsilon(1e-6));
  CHECK(calibration.profile.context_overhead_bytes == 100'000);
  REQUIRE(calibration.collectives.size() == 1);
  CHECK(calibration.collectives.front().fit.bus_bytes_per_s == doctest::Approx(4e9).epsilon(1e-6));
  // The profile file round-trips through the reader that --profile uses.
  const HardwareProfile back = apply_profile_json(
      profile_from_cluster(cluster), to_json(calibration, MachineInfo{"host", "cpu", 1, 2}, "2026-11-29"), "p.json");
  CHECK(back.peak_fp32_flops == doctest::Approx(calibration.profile.peak_fp32_flops));
  CHECK(back.intra_node.bus_bytes_per_s == doctest::Approx(4e9).epsilon(1e-6));
}

TEST_CASE("calibration: a gradient buffer's fill comes off its op before the compute rate is fitted") {
  // First backward ops of units also zero-fill the unit's gradient (Op::zeroed_bytes) at the memory rate; fitted
  // as compute, the fill would bend the rate (or the half-efficiency size) for every op.
  Noise noise;
  CalibrationSamples samples;
  const double memory_rate = 5e9;
  for (double bytes = 1e6; bytes <= 1e8; bytes *= 3) samples.memory.push_back({bytes, bytes / memory_rate * noise(0.01)});
  for (int i = 0; i < 30; ++i) {
    const double flops = 1e7 * (1 + i % 5);
    const std::int64_t zeroed = i % 3 == 0 ? std::int64_t{20} << 20 : 0;  // a third of the ops fill 20 MiB
    const double time_s = (flops + 1e6) / 2e10 + static_cast<double>(zeroed) / memory_rate;
    samples.compute.push_back({flops, time_s * noise(0.01), {}, 0, zeroed});
  }
  const Cluster cluster = parse_cluster("2xcpu", HardwareCatalog::builtin());
  const Calibration calibration = calibrate(profile_from_cluster(cluster), samples, "test");
  CHECK(calibration.memory.per_s == doctest::Approx(memory_rate).epsilon(0.02));
  CHECK(calibration.compute.per_s == doctest::Approx(2e10).epsilon(0.05));
  CHECK(calibration.compute.rms_relative_residual < 0.03);
  // Without the correction the same samples fit far worse.
  std::vector<ComputeSample> uncorrected = samples.compute;
  for (auto& sample : uncorrected) sample.zeroed_bytes = 0;
  CHECK(fit_compute_rate(uncorrected).rms_relative_residual > 0.2);
  // The samples in the profile file are predicted with their fill.
  const nlohmann::json document = to_json(calibration, MachineInfo{"host", "", 1, 2}, "2026-11-30");
  const auto& first = document.at("samples").at("compute").at(0);
  CHECK(first.at("zeroed_bytes") == std::int64_t{20} << 20);
  CHECK(std::abs(first.at("relative_residual").get<double>()) < 0.05);
}

TEST_CASE("calibration: the profile JSON carries fits per collective × group size, raw samples, machine and date") {
  CalibrationSamples samples;
  for (int ranks : {2, 4}) {
    for (std::int64_t bytes = 1024; bytes <= (std::int64_t{1} << 20); bytes *= 4) {
      const double time_s = ring_time_s(CollectiveKind::all_reduce, ranks, bytes, 1e-5, 2e9);
      samples.intra_node.push_back({CollectiveKind::all_reduce, ranks, false, bytes, time_s});
    }
  }
  samples.compute.push_back({1e8, 1e-2, "transformer_block fwd, 128 tokens"});
  samples.compute.push_back({4e8, 3.5e-2, "transformer_block fwd, 512 tokens"});
  samples.compute.push_back({0, 1e-4, "embedding fwd, 128 tokens"});  // no FLOPs: listed, not fitted
  const Cluster cluster = parse_cluster("4xcpu", HardwareCatalog::builtin());
  const Calibration calibration = calibrate(profile_from_cluster(cluster), samples, "p.json");
  const nlohmann::json document = to_json(calibration, MachineInfo{"node-a", "Some CPU", 1, 4}, "2026-11-29T10:00:00Z");
  CHECK(document.at("schema") == "shardplan.profile/v1");
  CHECK(document.at("machine").at("host") == "node-a");
  CHECK(document.at("machine").at("ranks") == 4);
  CHECK(document.at("date") == "2026-11-29T10:00:00Z");
  const auto& cells = document.at("fits").at("collectives");
  REQUIRE(cells.size() == 2);
  CHECK(cells[0].at("collective") == "all_reduce");
  CHECK(cells[0].at("ranks") == 2);
  CHECK(cells[1].at("ranks") == 4);
  CHECK(cells[1].at("latency_s").get<double>() == doctest::Approx(1e-5).epsilon(1e-6));
  CHECK(cells[1].at("bus_bytes_per_s").get<double>() == doctest::Approx(2e9).epsilon(1e-6));
  CHECK(cells[1].contains("rms_relative_residual"));
  CHECK(cells[1].contains("max_relative_residual"));
  CHECK(document.at("fits").at("compute").at("samples") == 2);
  const auto& collective_rows = document.at("samples").at("collectives");
  CHECK(collective_rows.size() == samples.intra_node.size());
  CHECK(collective_rows[0].at("relative_residual").get<double>() == doctest::Approx(0).epsilon(1e-6));
  CHECK(collective_rows[0].at("busbw_bytes_per_s").get<double>() > 0);
  const auto& compute_rows = document.at("samples").at("compute");
  REQUIRE(compute_rows.size() == 3);
  CHECK(compute_rows[0].at("name") == "transformer_block fwd, 128 tokens");
  CHECK(compute_rows[0].contains("relative_residual"));
  CHECK_FALSE(compute_rows[2].contains("relative_residual"));
  // Applied by --profile: the new keys are accepted and the fitted values taken.
  const HardwareProfile back = apply_profile_json(profile_from_cluster(cluster), document, "p.json");
  CHECK(back.intra_node.latency_s == doctest::Approx(calibration.profile.intra_node.latency_s));
  // Files written before the per-collective fits (machine as a plain string, fits per tier only) still apply.
  nlohmann::json old = to_json(calibration.profile);
  old["fits"] = {{"intra_node", {{"latency_s", 1e-5}, {"bus_bytes_per_s", 2e9}}}};
  old["machine"] = "node-a";
  old["date"] = "2026-01-01";
  CHECK(apply_profile_json(profile_from_cluster(cluster), old, "old.json").intra_node.bus_bytes_per_s ==
        doctest::Approx(calibration.profile.intra_node.bus_bytes_per_s));
}
