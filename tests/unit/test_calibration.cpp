// Tests of calibration: least-squares fits recover known α, β and rates from noisy synthetic samples.
#include <doctest/doctest.h>

#include <random>

#include "calibration.h"
#include "cluster.h"

using namespace shardplan;

namespace {

// Deterministic ±`amplitude` relative noise.
struct Noise {
  std::mt19937 generator{20261129};
  double operator()(double amplitude) {
    return 1.0 + amplitude * (2.0 * std::uniform_real_distribution<double>(0.0, 1.0)(generator) - 1.0);
  }
};

}  // namespace

TEST_CASE("calibration: α and β recovered from noisy ring-collective samples") {
  const double alpha_s = 5e-6, bus_bytes_per_s = 2e10;
  Noise noise;
  std::vector<CollectiveSample> samples;
  for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce}) {
    for (int ranks : {2, 4, 8}) {
      for (std::int64_t bytes = 1024; bytes <= (std::int64_t{64} << 20); bytes *= 4) {
        const CollectiveAlgorithm& algorithm = collective_algorithm(kind);
        const double time = algorithm.latency_steps(ranks) * alpha_s +
                            algorithm.bus_factor(ranks) * static_cast<double>(bytes) / bus_bytes_per_s;
        samples.push_back({kind, ranks, false, bytes, time * noise(0.01)});
      }
    }
  }
  const LinkFit fit = fit_link(samples);
  CHECK(fit.samples == samples.size());
  CHECK(fit.latency_s == doctest::Approx(alpha_s).epsilon(0.05));
  CHECK(fit.bus_bytes_per_s == doctest::Approx(bus_bytes_per_s).epsilon(0.02));
  CHECK(fit.rms_relative_residual < 0.01);
}

TEST_CASE("calibration: compute and memory rates recovered; the profile takes the fitted values") {
  Noise noise;
  CalibrationSamples samples;
  // Compute with a fixed cost per op: t = (flops + 2e9) / 3e12.
  for (double flops = 1e9; flops <= 1e12; flops *= 3) {
    samples.compute.push_back({flops, (flops + 2e9) / 3e12 * noise(0.02)});
  }
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
  CHECK(calibration.memory.per_s == doctest::Approx(1.5e12).epsilon(0.02));
  CHECK(calibration.profile.peak_fp32_flops == doctest::Approx(calibration.compute.per_s));
  CHECK(calibration.profile.intra_node.bus_bytes_per_s == doctest::Approx(4e9).epsilon(1e-6));
  CHECK(calibration.profile.intra_node.latency_s == doctest::Approx(1e-5).epsilon(1e-6));
  CHECK(calibration.profile.context_overhead_bytes == 100'000);
  // The profile file round-trips through the reader that --profile uses.
  const HardwareProfile back =
      apply_profile_json(profile_from_cluster(cluster), to_json(calibration, "host", "2026-11-29"), "p.json");
  CHECK(back.peak_fp32_flops == doctest::Approx(calibration.profile.peak_fp32_flops));
  CHECK(back.intra_node.bus_bytes_per_s == doctest::Approx(4e9).epsilon(1e-6));
}
