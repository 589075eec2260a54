// Tests of the calibrated profile: calibrate() takes the fitted rates, and the profile JSON carries fits per
// collective × group size, raw samples, machine and date, and round-trips through --profile's reader.
#include <doctest/doctest.h>

#include "calibration.h"
#include "calibration_fixtures.h"
#include "cluster.h"

using namespace shardplan;
using namespace shardplan::testing;

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
