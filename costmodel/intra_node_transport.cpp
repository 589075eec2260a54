// Intra-node transport: PCIe line rates and the bus bandwidth NCCL reaches over P2P and SHM (nccl-tests figures).
#include "intra_node_transport.h"

#include <algorithm>
#include <cctype>

#include "hardware_catalog.h"

namespace shardplan {
namespace {

// Note [Intra-node transport]: what NCCL's ring reaches on each transport, as nccl-tests' busbw.
//
// PCIe P2P: 4 × RTX 4090 on an EPYC 7773X with peer access enabled (tinygrad's patched open kernel modules):
// all_reduce_perf busbw 25.72, 25.82, 25.95 GB/s at 256 MiB, 512 MiB, 1 GiB
// (https://github.com/tinygrad/open-gpu-kernel-modules/issues/36). Through the model's size curve (collective_cost.h:
// NCCL's latencies, S½ = 4 MiB) that is 26.1 GB/s at large sizes, 0.83 of the Gen4 x16 line rate (31.5 GB/s). Two
// other figures agree within 8%: NCCL's topology search gives a Gen4 x16 link 24 GB/s ("PCI[24.0]" in the log of
// https://github.com/NVIDIA/nccl-tests/issues/307), and NCCL's maintainer quotes 12 GB/s for GPUs under one PCIe Gen3
// switch (0.76 of 15.75; https://github.com/NVIDIA/nccl/issues/406). The nccl-tests table is taken: it was measured
// at the message sizes FSDP moves, the others are a model constant and a remark.
constexpr double kPcieP2pBusEfficiency = 0.83;
//
// PCIe SHM (no peer access): NCCL's SHM kernels read the host buffer over PCIe a cache line at a time. Two RTX 5070 Ti
// (PCIe 4.0 x16, 26 GB/s per direction for copies) ran a 20 MiB bf16 all-reduce in 10.9 ms, 1.9 GB/s, under the LL,
// LL128 and Simple protocols alike, measured in a serving run's torch profiler
// (https://github.com/sgl-project/sglang/pull/39605); through the size curve, 2.3 GB/s at large sizes. It disagrees
// with NCCL 2.4.8's 3.2 GB/s all-gather / reduce-scatter on two Gen3 GPUs with one channel
// (https://github.com/NVIDIA/nccl/issues/384, 2020): the 2026 figure is taken, measured on a current NCCL and a
// Gen4 consumer card as a training or serving job runs the kernel, with real tensor shapes. SHM is bounded by PCIe
// read latency, not the line rate, so the same figure stands for every generation (capped by the P2P rate).
// NCCL_SHM_USE_CUDA_MEMCPY=1 (copy engines) reached 12.5 GB/s on the same machine: a cluster file can say so with
// "intra_node_bus_efficiency" on a pcie-p2p-like entry.
constexpr double kPcieShmBusBytesPerS = 2.3e9;

// PCI-SIG transfer rates per lane, GT/s, by generation (index = generation).
constexpr double kGigaTransfersPerLane[] = {0, 2.5, 5, 8, 16, 32, 64};

std::string lowercase(std::string_view text) {
  std::string result(text);
  for (auto& c : result) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return result;
}

}  // namespace

const char* to_string(IntraNodeTransport transport) {
  switch (transport) {
    case IntraNodeTransport::nvlink: return "nvlink";
    case IntraNodeTransport::pcie_p2p: return "pcie-p2p";
    case IntraNodeTransport::pcie_shm: return "pcie-shm";
  }
  return "nvlink";
}

std::optional<IntraNodeTransport> parse_intra_node_transport(std::string_view text) {
  const std::string name = lowercase(text);
  for (const auto transport : {IntraNodeTransport::nvlink, IntraNodeTransport::pcie_p2p, IntraNodeTransport::pcie_shm}) {
    if (name == to_string(transport)) return transport;
  }
  return std::nullopt;
}

double pcie_line_bytes_per_s(int generation, int lanes) {
  if (generation < 1 || generation > 6 || lanes <= 0) return 0;
  // Gen1/Gen2 use 8b/10b; Gen3 on 128b/130b (PCI-SIG). Gen6's FLIT mode is taken at 128/130 as well.
  const double encoding = generation <= 2 ? 8.0 / 10.0 : 128.0 / 130.0;
  return kGigaTransfersPerLane[generation] * 1e9 * encoding / 8.0 * lanes;
}

IntraNodeBus intra_node_bus(const GpuSpec& gpu) {
  const auto transport = parse_intra_node_transport(gpu.intra_node_transport);
  const double line = pcie_line_bytes_per_s(gpu.pcie_generation, gpu.pcie_lanes);
  if (!transport || *transport == IntraNodeTransport::nvlink || line <= 0) {
    // NVLink / Infinity Fabric, or a PCIe entry that gives no generation: the entry's own numbers.
    return {gpu.intra_node_link, gpu.intra_node_bytes_per_s,
            gpu.intra_node_bus_efficiency > 0 ? gpu.intra_node_bus_efficiency : 0.8};
  }
  const std::string link = "PCIe Gen" + std::to_string(gpu.pcie_generation) + " x" + std::to_string(gpu.pcie_lanes);
  const double p2p_efficiency = gpu.intra_node_bus_efficiency > 0 ? gpu.intra_node_bus_efficiency : kPcieP2pBusEfficiency;
  if (*transport == IntraNodeTransport::pcie_p2p) return {link + " P2P", line, p2p_efficiency};
  // SHM: the measured bus bandwidth as the tier's peak, reached whole (efficiency 1), never above what P2P would reach.
  return {link + " SHM (via host memory)", std::min(kPcieShmBusBytesPerS, line * p2p_efficiency), 1.0};
}

}  // namespace shardplan
