// Tests of collective cost (ring α-β model, nccl-tests algbw/busbw) and of HardwareProfile construction and JSON.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "cluster.h"
#include "collective_cost.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"

using shardplan::CollectiveKind;
using shardplan::GroupPlacement;
using shardplan::HardwareProfile;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string input_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const shardplan::InputError& error) {
    return error.what();
  }
  return "<no InputError thrown>";
}

// Round numbers so every expected time can be worked out by hand.
HardwareProfile hand_profile() {
  HardwareProfile profile;
  profile.intra_node = {"hand-link", 1e-6, 100e9, 0.5};  // α = 1 µs, 100 GB/s, half of it reached
  profile.inter_node = {"hand-nic", 4e-6, 10e9, 0.5};    // α = 4 µs, 10 GB/s per node, half of it reached
  profile.comm_half_efficiency_bytes = 1e6;
  return profile;
}

}  // namespace

TEST_CASE("collective: busbw factors and ring steps match nccl-tests doc/PERFORMANCE.md") {
  const auto& ag = shardplan::all_gather_algorithm();
  const auto& rs = shardplan::reduce_scatter_algorithm();
  const auto& ar = shardplan::all_reduce_algorithm();
  const int ranks[] = {1, 2, 3, 4, 8};
  const double gather_factor[] = {0.0, 1.0 / 2, 2.0 / 3, 3.0 / 4, 7.0 / 8};
  const int ring_steps[] = {0, 1, 2, 3, 7};
  for (int i = 0; i < 5; ++i) {
    CAPTURE(ranks[i]);
    CHECK(ag.bus_factor(ranks[i]) == gather_factor[i]);
    CHECK(rs.bus_factor(ranks[i]) == gather_factor[i]);
    CHECK(ar.bus_factor(ranks[i]) == 2 * gather_factor[i]);
    CHECK(ag.latency_steps(ranks[i]) == ring_steps[i]);
    CHECK(rs.latency_steps(ranks[i]) == ring_steps[i]);
    CHECK(ar.latency_steps(ranks[i]) == 2 * ring_steps[i]);
  }
}

TEST_CASE("collective: the driver dispatches each kind to its plug-in and names it") {
  for (auto kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce}) {
    CHECK(shardplan::collective_algorithm(kind).kind == kind);
  }
  CHECK(std::string(shardplan::to_string(CollectiveKind::all_gather)) == "all_gather");
  CHECK(std::string(shardplan::to_string(CollectiveKind::reduce_scatter)) == "reduce_scatter");
  CHECK(std::string(shardplan::to_string(CollectiveKind::all_reduce)) == "all_reduce");
}

TEST_CASE("collective: a 2-rank intra-node all-gather, by hand") {
  // S = 1 MB = S½ → eff = 0.5 × 1/2 = 0.25; time = 1·α + (1/2)·1e6 / (100e9 × 0.25) = 1e-6 + 2e-5 = 2.1e-5 s.
  const auto cost = shardplan::collective_cost(CollectiveKind::all_gather, 1'000'000, {2, false}, hand_profile());
  CHECK(cost.time_s == doctest::Approx(2.1e-5).epsilon(1e-12));
  CHECK(cost.tier == "hand-link");
  CHECK(cost.algbw_bytes_per_s == doctest::Approx(1e6 / 2.1e-5).epsilon(1e-12));
  CHECK(cost.busbw_bytes_per_s == doctest::Approx(0.5e6 / 2.1e-5).epsilon(1e-12));
}

TEST_CASE("collective: one rank costs nothing; zero bytes cost only latency; negative bytes are a bug") {
  const auto profile = hand_profile();
  const auto alone = shardplan::collective_cost(CollectiveKind::all_reduce, 1 << 30, {1, true}, profile);
  CHECK(alone.time_s == 0);
  CHECK(alone.algbw_bytes_per_s == 0);
  CHECK(alone.busbw_bytes_per_s == 0);
  CHECK(alone.tier == "none");

  const auto empty = shardplan::collective_cost(CollectiveKind::all_gather, 0, {4, false}, profile);
  CHECK(empty.time_s == doctest::Approx(3e-6).epsilon(1e-12));  // 3 ring steps × 1 µs
  CHECK(empty.algbw_bytes_per_s == 0);

  CHECK_THROWS_AS(shardplan::collective_cost(CollectiveKind::all_gather, -1, {2, false}, profile),
                  shardplan::InternalError);
}

TEST_CASE("collective: ring all-reduce is reduce-scatter plus all-gather (α = 0)") {
  auto profile = hand_profile();
  profile.intra_node.latency_s = 0;
  for (int ranks : {2, 3, 4, 8}) {
    CAPTURE(ranks);
    const std::int64_t bytes = 3 * 1'048'576 + 7;  // odd sizes too
    const auto rs = shardplan::collective_cost(CollectiveKind::reduce_scatter, bytes, {ranks, false}, profile);
    const auto ag = shardplan::collective_cost(CollectiveKind::all_gather, bytes, {ranks, false}, profile);
    const auto ar = shardplan::collective_cost(CollectiveKind::all_reduce, bytes, {ranks, false}, profile);
    CHECK(ar.time_s == doctest::Approx(2 * rs.time_s).epsilon(1e-12));
    CHECK(ar.time_s == doctest::Approx(rs.time_s + ag.time_s).epsilon(1e-12));
    // Same bus bandwidth: the busbw factor normalises the extra traffic away (nccl-tests' point of busbw).
    CHECK(ar.busbw_bytes_per_s == doctest::Approx(rs.busbw_bytes_per_s).epsilon(1e-12));
  }
}

TEST_CASE("collective: a group spanning nodes runs on the inter-node tier and is slower") {
  auto profile = hand_profile();
  profile.gpus_per_node = 4;
  const std::int64_t bytes = 64 << 20;
  const double s = static_cast<double>(bytes);
  const auto inside = shardplan::collective_cost(CollectiveKind::reduce_scatter, bytes, {4, false}, profile);
  // Two nodes of four: of the ring's 7 steps one crosses between them (NCCL's nInterSteps = nodes − 1).
  const auto across = shardplan::collective_cost(CollectiveKind::reduce_scatter, bytes, {8, true}, profile);
  CHECK(inside.tier == "hand-link");
  CHECK(across.tier == "hand-nic");
  CHECK(across.time_s > inside.time_s);
  // By hand (Note [Rails]): 6·1 µs + 1·4 µs + (7/8)·(S + 1e6) / min(100e9·0.5, 10e9·0.5 for the whole node).
  CHECK(across.time_s == doctest::Approx(6e-6 + 4e-6 + 0.875 * (s + 1e6) / 5e9).epsilon(1e-12));

  // One rank per node (HSDP's replica groups): every step crosses, and the group gets a quarter of the node's NICs.
  const auto replica = shardplan::collective_cost(CollectiveKind::reduce_scatter, bytes, {2, true, 1}, profile);
  CHECK(replica.time_s == doctest::Approx(4e-6 + 0.5 * (s + 1e6) / 1.25e9).epsilon(1e-12));

  // A fabric faster than the intra-node link leaves the intra-node link the bottleneck.
  auto fast_fabric = profile;
  fast_fabric.inter_node.bus_bytes_per_s = 1e12;
  const auto bounded = shardplan::collective_cost(CollectiveKind::reduce_scatter, bytes, {8, true}, fast_fabric);
  CHECK(bounded.time_s == doctest::Approx(6e-6 + 4e-6 + 0.875 * (s + 1e6) / 50e9).epsilon(1e-12));
}

TEST_CASE("collective: algbw and busbw definitions round-trip") {
  const auto profile = hand_profile();
  for (auto kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce}) {
    for (int ranks : {2, 3, 8}) {
      CAPTURE(ranks);
      const std::int64_t bytes = 12'345'679;
      const auto cost = shardplan::collective_cost(kind, bytes, {ranks, ranks > 4}, profile);
      CHECK(shardplan::algorithm_bandwidth(bytes, cost.time_s) == doctest::Approx(cost.algbw_bytes_per_s));
      CHECK(shardplan::bus_bandwidth(kind, bytes, cost.time_s, ranks) == doctest::Approx(cost.busbw_bytes_per_s));
      CHECK(cost.algbw_bytes_per_s * cost.time_s == doctest::Approx(static_cast<double>(bytes)));
    }
  }
  CHECK(shardplan::algorithm_bandwidth(1000, 0.5) == 2000);
  CHECK(shardplan::bus_bandwidth(CollectiveKind::all_reduce, 1000, 0.5, 4) == 3000);  // 2000 × 2·3/4
}

TEST_CASE("collective: small messages reach lower busbw than large ones") {
  const auto cluster = shardplan::parse_cluster("8xH100-80GB", shardplan::HardwareCatalog::builtin());
  const auto profile = shardplan::profile_from_cluster(cluster);
  double previous = 0;
  for (std::int64_t bytes : {std::int64_t{1} << 10, std::int64_t{1} << 20, std::int64_t{1} << 26,
                             std::int64_t{1} << 30}) {
    CAPTURE(bytes);
    const auto cost = shardplan::collective_cost(CollectiveKind::all_gather, bytes, {8, false}, profile);
    CHECK(cost.busbw_bytes_per_s > previous);
    CHECK(cost.busbw_bytes_per_s < profile.intra_node.bus_bytes_per_s * profile.intra_node.efficiency);
    previous = cost.busbw_bytes_per_s;
  }
}

TEST_CASE("collective: profile_from_cluster takes the GPU's link for intra-node and the fabric for inter-node") {
  const auto catalog = shardplan::HardwareCatalog::builtin();
  const auto cluster = shardplan::parse_cluster("2x8xH100-80GB", catalog);
  const auto profile = shardplan::profile_from_cluster(cluster);
  const auto& gpu = catalog.gpu("H100-80GB");
  CHECK(profile.source == "catalog");
  CHECK(profile.device == "H100-80GB");
  CHECK(profile.nodes == 2);
  CHECK(profile.gpus_per_node == 8);
  CHECK(contains(profile.intra_node.name, "NVLink"));
  CHECK(profile.intra_node.bus_bytes_per_s == gpu.intra_node_bytes_per_s);
  CHECK(profile.intra_node.latency_s == gpu.intra_node_latency_s);
  CHECK(profile.inter_node.name == "ib-ndr");
  // The node's network: one NDR NIC per GPU, eight of them (Note [Rails]).
  CHECK(profile.inter_node.bus_bytes_per_s == 8 * catalog.fabric("ib-ndr").bytes_per_s_per_gpu);
  CHECK(profile.inter_node.latency_s == catalog.fabric("ib-ndr").latency_s);
  CHECK(profile.peak_bf16_flops == gpu.peak_bf16_flops);
  CHECK(profile.peak_fp32_flops == gpu.peak_fp32_flops);
  CHECK(profile.hbm_bytes_per_s == gpu.hbm_bytes_per_s);
  CHECK(profile.pcie_bytes_per_s == gpu.pcie_bytes_per_s);
  CHECK(profile.context_overhead_bytes == gpu.context_overhead_bytes);
  CHECK(profile.peak_flops_for_bytes(4) == gpu.peak_fp32_flops);
  CHECK(profile.peak_flops_for_bytes(2) == gpu.peak_bf16_flops);
  CHECK_THROWS_AS(profile.peak_flops_for_bytes(3), shardplan::InternalError);
}

TEST_CASE("collective: profile JSON round-trips through to_json and apply_profile_json") {
  const auto cluster = shardplan::parse_cluster("2x8xH100-80GB", shardplan::HardwareCatalog::builtin());
  auto original = shardplan::profile_from_cluster(cluster);
  original.set_overlap_slowdowns(1.25, 1.5, 1.75);
  original.overlap_collective_slowdown = 2.5;
  const auto document = shardplan::to_json(original);
  CHECK(document.at("schema") == "shardplan.profile/v1");
  const auto back = shardplan::apply_profile_json(HardwareProfile{}, document, "calibrated.json");
  CHECK(back.source == "calibrated.json");
  CHECK(back.device == original.device);
  CHECK(back.nodes == original.nodes);
  CHECK(back.gpus_per_node == original.gpus_per_node);
  CHECK(back.peak_bf16_flops == original.peak_bf16_flops);
  CHECK(back.peak_fp16_flops == original.peak_fp16_flops);
  CHECK(back.peak_fp32_flops == original.peak_fp32_flops);
  CHECK(back.max_compute_efficiency == original.max_compute_efficiency);
  CHECK(back.half_efficiency_flops == original.half_efficiency_flops);
  CHECK(back.hbm_bytes_per_s == original.hbm_bytes_per_s);
  CHECK(back.memory_efficiency == original.memory_efficiency);
  CHECK(back.pcie_bytes_per_s == original.pcie_bytes_per_s);
  CHECK(back.intra_node.name == original.intra_node.name);
  CHECK(back.intra_node.latency_s == original.intra_node.latency_s);
  CHECK(back.intra_node.bus_bytes_per_s == original.intra_node.bus_bytes_per_s);
  CHECK(back.inter_node.name == original.inter_node.name);
  CHECK(back.inter_node.latency_s == original.inter_node.latency_s);
  CHECK(back.inter_node.bus_bytes_per_s == original.inter_node.bus_bytes_per_s);
  CHECK(back.comm_half_efficiency_bytes == original.comm_half_efficiency_bytes);
  CHECK(back.intra_node.efficiency == original.intra_node.efficiency);
  CHECK(back.inter_node.efficiency == original.inter_node.efficiency);
  CHECK(back.collective_base_latency_s == original.collective_base_latency_s);
  CHECK(back.nvls_bus_bytes_per_s == original.nvls_bus_bytes_per_s);
  CHECK(back.clock_fraction == original.clock_fraction);
  CHECK(back.attention_forward_efficiency == original.attention_forward_efficiency);
  CHECK(back.attention_backward_efficiency == original.attention_backward_efficiency);
  CHECK(back.attention_half_seq_len == original.attention_half_seq_len);
  CHECK(back.triton_attention_efficiency == original.triton_attention_efficiency);
  CHECK(back.kernel_dispatch_s == original.kernel_dispatch_s);
  CHECK(back.overlap_gemm_slowdown == 1.25);
  CHECK(back.overlap_attention_slowdown == 1.5);
  CHECK(back.overlap_memory_slowdown == 1.75);
  CHECK(back.overlap_compute_slowdown == 1.25);
  CHECK(back.overlap_collective_slowdown == 2.5);
  CHECK(back.context_overhead_bytes == original.context_overhead_bytes);
  CHECK(shardplan::to_json(back).at("compute") == document.at("compute"));
  CHECK(shardplan::to_json(back).at("communication") == document.at("communication"));

  // A partial profile overrides only what it names; calibration's reserved keys are accepted.
  const nlohmann::json partial = {{"schema", "shardplan.profile/v1"},
                                  {"samples", nlohmann::json::array()},
                                  {"compute", {{"memory_efficiency", 0.9}, {"fits", {{"r2", 0.99}}}}},
                                  {"communication", {{"inter_node", {{"bus_bytes_per_s", 40e9}}}}}};
  const auto patched = shardplan::apply_profile_json(original, partial, "p.json");
  CHECK(patched.memory_efficiency == 0.9);
  CHECK(patched.inter_node.bus_bytes_per_s == 40e9);
  CHECK(patched.inter_node.name == "ib-ndr");
  CHECK(patched.peak_bf16_flops == original.peak_bf16_flops);
}

TEST_CASE("collective: apply_profile_json errors name the file and the field") {
  const HardwareProfile base;
  const auto apply = [&](const nlohmann::json& document) {
    return input_error([&] { shardplan::apply_profile_json(base, document, "prof.json"); });
  };
  const auto with_schema = [](nlohmann::json document) {
    document["schema"] = "shardplan.profile/v1";
    return document;
  };
  std::string message = apply({{"schema", "shardplan.cluster/v1"}});
  CHECK(contains(message, "prof.json"));
  CHECK(contains(message, "field 'schema'"));
  CHECK(contains(apply(nlohmann::json::object()), "field 'schema'"));
  CHECK(contains(apply(nlohmann::json::array()), "prof.json"));

  message = apply(with_schema({{"compute", {{"memory_efficiency", 1.5}}}}));
  CHECK(contains(message, "field 'compute.memory_efficiency'"));
  CHECK(contains(message, "(0, 1]"));
  CHECK(contains(apply(with_schema({{"compute", {{"peak_bf16_flops", -1}}}})), "field 'compute.peak_bf16_flops'"));
  CHECK(contains(apply(with_schema({{"communication", {{"intra_node", {{"bus_bytes_per_s", 0}}}}}})),
                 "field 'communication.intra_node.bus_bytes_per_s'"));
  CHECK(contains(apply(with_schema({{"communication", {{"inter_node", {{"latency_s", -1e-6}}}}}})),
                 "field 'communication.inter_node.latency_s'"));
  CHECK(contains(apply(with_schema({{"communication", {{"bus_efficiency", 0}}}})),
                 "field 'communication.bus_efficiency'"));
  CHECK(contains(apply(with_schema({{"overlap_compute_slowdown", 0.9}})), "field 'overlap_compute_slowdown'"));
  CHECK(contains(apply(with_schema({{"overlap_collective_slowdown", 0.5}})), "field 'overlap_collective_slowdown'"));
  CHECK(contains(apply(with_schema({{"nodes", 0}})), "field 'nodes'"));
  CHECK(contains(apply(with_schema({{"compute", "fast"}})), "field 'compute'"));

  message = apply(with_schema({{"comput", nlohmann::json::object()}}));
  CHECK(contains(message, "unknown field 'comput'"));
  CHECK(contains(message, "'compute'"));
  message = apply(with_schema({{"compute", {{"hbm_bytes_per_sec", 1e12}}}}));
  CHECK(contains(message, "unknown field 'compute.hbm_bytes_per_sec'"));
  CHECK(contains(message, "'hbm_bytes_per_s'"));
}

TEST_CASE("profile: calibrated per-collective fits replace the tier's α-β for their cell only") {
  const shardplan::HardwareCatalog catalog = shardplan::HardwareCatalog::builtin();
  const HardwareProfile base = shardplan::profile_from_cluster(shardplan::parse_cluster("8xH100-80GB", catalog));
  const nlohmann::json document = {
      {"schema", "shardplan.profile/v1"},
      {"fits",
       {{"collectives",
         {{{"collective", "reduce_scatter"}, {"ranks", 8}, {"spans_nodes", false}, {"latency_s", 1e-4},
           {"bus_bytes_per_s", 1e10}, {"samples", 12}},
          // Too few samples to separate α from β: ignored.
          {{"collective", "all_gather"}, {"ranks", 8}, {"spans_nodes", false}, {"latency_s", 1.0},
           {"bus_bytes_per_s", 1.0}, {"samples", 1}}}}}}};
  const HardwareProfile calibrated = shardplan::apply_profile_json(base, document, "fit.json");
  REQUIRE(calibrated.collective_fits.size() == 1);
  const std::int64_t bytes = 1 << 26;
  const GroupPlacement eight{8, false};
  // 7 ring steps × 100 µs + 7/8 · 64 MiB / 10 GB/s.
  const double expected_s = 7 * 1e-4 + 7.0 / 8.0 * static_cast<double>(bytes) / 1e10;
  const auto fitted = shardplan::collective_cost(CollectiveKind::reduce_scatter, bytes, eight, calibrated);
  CHECK(fitted.time_s == doctest::Approx(expected_s));
  CHECK(fitted.tier == "calibrated");
  // Other cells keep the catalog's model: the all-gather (its fit was dropped) and the 4-rank reduce-scatter.
  CHECK(shardplan::collective_cost(CollectiveKind::all_gather, bytes, eight, calibrated).time_s ==
        doctest::Approx(shardplan::collective_cost(CollectiveKind::all_gather, bytes, eight, base).time_s));
  const GroupPlacement four{4, false};
  CHECK(shardplan::collective_cost(CollectiveKind::reduce_scatter, bytes, four, calibrated).time_s ==
        doctest::Approx(shardplan::collective_cost(CollectiveKind::reduce_scatter, bytes, four, base).time_s));
  // A fit naming an unknown collective is bad input.
  nlohmann::json bad = document;
  bad["fits"]["collectives"][0]["collective"] = "all_to_all";
  CHECK(contains(input_error([&] { (void)shardplan::apply_profile_json(base, bad, "fit.json"); }), "collectives"));
}
