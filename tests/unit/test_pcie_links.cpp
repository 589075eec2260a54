// NCCL's intra-node bus bandwidth on PCIe boxes with and without peer-to-peer against published nccl-tests figures
// (Note [Intra-node transport] in costmodel/intra_node_transport.cpp), and the catalog fields that select the transport.
// Can fail: with intra_node_bus() ignoring the transport (every PCIe card a 32 GB/s link at 0.8, as before issue 34)
// the SHM row would read ≈ 21 GB/s against 1.92 (worked by hand from collective_cost's formula; not run as a mutation).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cluster.h"
#include "collective_cost.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "intra_node_transport.h"

using namespace shardplan;

namespace {

struct LinkRow {
  std::string what;
  double published = 0;  // busbw, GB/s, as nccl-tests prints it
  double model = 0;
  const char* source = "";
  bool asserted = true;  // false: a disagreeing source printed beside the one taken (the Note says which and why)
};

// Prints the table and checks every asserted row within `most` of its published figure.
void check_links(const char* title, const std::vector<LinkRow>& rows, double most) {
  std::string table = std::string(title) + "\n";
  for (const LinkRow& row : rows) {
    char line[320];
    std::snprintf(line, sizeof line, "  %-52s published %6.2f  model %6.2f  %+6.1f%%  (%s)%s\n", row.what.c_str(),
                  row.published, row.model, 100 * (row.model / row.published - 1), row.source,
                  row.asserted ? "" : "  [not asserted]");
    table += line;
  }
  MESSAGE(table);
  for (const LinkRow& row : rows) {
    if (!row.asserted) continue;
    CAPTURE(row.what);
    CHECK(std::abs(row.model / row.published - 1) <= most);
  }
}

// The builtin catalog with one GPU's transport (and optionally its PCIe link) replaced, as a cluster file's "catalog"
// would do it.
HardwareCatalog with_transport(const std::string& gpu, const std::string& transport, int generation = 0) {
  HardwareCatalog catalog = HardwareCatalog::builtin();
  nlohmann::json entry = {{"name", gpu}, {"intra_node_transport", transport}};
  if (generation > 0) entry["pcie_generation"] = generation;
  catalog.merge_user_json({{"gpus", {entry}}}, "test-catalog.json");
  return catalog;
}

double busbw_gbs(CollectiveKind kind, double bytes, int ranks, const HardwareProfile& profile) {
  return collective_cost(kind, static_cast<std::int64_t>(bytes), {ranks, false}, profile).busbw_bytes_per_s / 1e9;
}

}  // namespace

TEST_CASE("pcie links: NCCL busbw on PCIe boxes with and without P2P against nccl-tests figures") {
  const double mib = 1 << 20;
  constexpr auto ag = CollectiveKind::all_gather, rs = CollectiveKind::reduce_scatter, ar = CollectiveKind::all_reduce;
  const HardwareCatalog p2p_catalog = with_transport("RTX4090", "pcie-p2p");
  const HardwareProfile p2p4 = profile_from_cluster(parse_cluster("4xRTX4090", p2p_catalog));
  const HardwareProfile shm2 = profile_from_cluster(parse_cluster("2xRTX4090", HardwareCatalog::builtin()));
  const HardwareProfile shm8 = profile_from_cluster(parse_cluster("8xRTX4090", HardwareCatalog::builtin()));
  const HardwareProfile gen3_4 =
      profile_from_cluster(parse_cluster("4xRTX-A6000", with_transport("RTX-A6000", "pcie-p2p", 3)));
  const char* tinygrad = "tinygrad/open-gpu-kernel-modules#36, 4 x RTX 4090, P2P";
  const char* sglang = "sgl-project/sglang#39605, 2 x RTX 5070 Ti Gen4, SHM";
  check_links("intra-node busbw GB/s on PCIe (P2P: peer access; SHM: through host memory)",
              {{"4 x RTX 4090 P2P Gen4 x16, all-reduce 256 MiB", 25.72, busbw_gbs(ar, 256 * mib, 4, p2p4), tinygrad},
               {"4 x RTX 4090 P2P Gen4 x16, all-reduce 512 MiB", 25.82, busbw_gbs(ar, 512 * mib, 4, p2p4), tinygrad},
               {"4 x RTX 4090 P2P Gen4 x16, all-reduce 1 GiB", 25.95, busbw_gbs(ar, 1024 * mib, 4, p2p4), tinygrad},
               {"4 GPUs P2P under one Gen3 x16 switch, all-gather 1 GiB", 12.0, busbw_gbs(ag, 1024 * mib, 4, gen3_4),
                "nccl#406 (maintainer's figure)"},
               {"2 x RTX 4090 SHM Gen4 x16, all-reduce 20 MiB", 1.92, busbw_gbs(ar, 20 * mib, 2, shm2), sglang},
               {"2 GPUs SHM Gen3 x16, all-gather (1 channel, NCCL 2.4.8)", 3.17, busbw_gbs(ag, 128 * mib, 2, shm2),
                "nccl#384 (2020)", false},
               {"2 GPUs SHM Gen3 x16, reduce-scatter (1 channel, NCCL 2.4.8)", 3.17, busbw_gbs(rs, 128 * mib, 2, shm2),
                "nccl#384 (2020)", false}},
              0.10);

  // What FSDP's collectives get on an 8-GPU consumer box: the SHM path for all-gather and reduce-scatter alike, an
  // order of magnitude below the P2P link the catalog assumed before (32 GB/s × 0.8).
  const double shm_ag = busbw_gbs(ag, 256 * mib, 8, shm8), shm_rs = busbw_gbs(rs, 256 * mib, 8, shm8);
  MESSAGE("8 x RTX 4090 SHM, 256 MiB: all-gather " << shm_ag << " GB/s, reduce-scatter " << shm_rs << " GB/s");
  CHECK(shm_ag == doctest::Approx(shm_rs));
  CHECK(shm_ag < 0.1 * 32 * 0.8);
  CHECK(shm8.intra_node.name == "PCIe Gen4 x16 SHM (via host memory)");
  CHECK(p2p4.intra_node.name == "PCIe Gen4 x16 P2P");
}

TEST_CASE("pcie links: the catalog's PCIe cards name their transport; NVLink parts keep their link") {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  for (const char* consumer : {"RTX4090", "RTX3090"}) {
    CAPTURE(consumer);
    CHECK(catalog.gpu(consumer).intra_node_transport == "pcie-shm");
  }
  for (const char* datacenter : {"L40S", "A10G", "L4", "RTX-A6000", "RTX6000-Ada", "H100-PCIe", "H100-NVL"}) {
    CAPTURE(datacenter);
    CHECK(catalog.gpu(datacenter).intra_node_transport == "pcie-p2p");
    CHECK(catalog.gpu(datacenter).pcie_generation >= 4);
    CHECK(catalog.gpu(datacenter).pcie_lanes == 16);
  }
  const HardwareProfile h100 = profile_from_cluster(parse_cluster("8xH100-80GB", catalog));
  CHECK(h100.intra_node.bus_bytes_per_s == catalog.gpu("H100-80GB").intra_node_bytes_per_s);
  // PCIe line rates per direction (PCI-SIG): Gen3 x16 15.75, Gen4 x16 31.5, Gen5 x16 63.0 GB/s.
  CHECK(pcie_line_bytes_per_s(3, 16) / 1e9 == doctest::Approx(15.754).epsilon(1e-3));
  CHECK(pcie_line_bytes_per_s(4, 16) / 1e9 == doctest::Approx(31.508).epsilon(1e-3));
  CHECK(pcie_line_bytes_per_s(5, 8) / 1e9 == doctest::Approx(31.508).epsilon(1e-3));
  CHECK(pcie_line_bytes_per_s(0, 16) == 0);
}

TEST_CASE("pcie links: catalog entries read and write the transport; a bad one names the field") {
  HardwareCatalog catalog = HardwareCatalog::builtin();
  catalog.merge_user_json({{"gpus", {{{"name", "RTX4090"}, {"intra_node_transport", "PCIe-P2P"}, {"pcie_lanes", 8}}}}},
                          "mine.json");
  CHECK(catalog.gpu("RTX4090").intra_node_transport == "pcie-p2p");
  CHECK(catalog.gpu("RTX4090").pcie_lanes == 8);
  const auto document = to_json(catalog.gpu("RTX4090"));
  CHECK(document.at("intra_node_transport") == "pcie-p2p");
  CHECK(document.at("pcie_generation") == 4);
  // Eight lanes halve the P2P ring.
  const HardwareProfile x8 = profile_from_cluster(parse_cluster("4xRTX4090", catalog));
  CHECK(x8.intra_node.bus_bytes_per_s == doctest::Approx(pcie_line_bytes_per_s(4, 8)));
  std::string message;
  try {
    catalog.merge_user_json({{"gpus", {{{"name", "L40S"}, {"intra_node_transport", "nvlink4"}}}}}, "mine.json");
  } catch (const InputError& error) {
    message = error.what();
  }
  CHECK(message.find("intra_node_transport") != std::string::npos);
  CHECK(message.find("pcie-shm") != std::string::npos);
}
