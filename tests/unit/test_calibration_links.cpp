// Tests of the link calibration: least-squares fits recover known α, β (pooled and per collective × group size ×
// tier) and the collectives' slowdown beside compute from noisy synthetic samples; α only where sizes tell it apart.
#include <doctest/doctest.h>

#include "calibration.h"
#include "calibration_fixtures.h"
#include "cluster.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

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
