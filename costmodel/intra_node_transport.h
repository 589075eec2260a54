// The transport NCCL runs between GPUs of one node (NVLink, PCIe peer-to-peer, or host shared memory) and the ring
// bus bandwidth each reaches, from the PCIe generation and lanes and nccl-tests figures (Note [Intra-node transport]).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardplan {

struct GpuSpec;

// Note [Intra-node transport] (intra_node_transport.cpp): NCCL connects two GPUs of a node over NVLink where there is
// one, else over PCIe peer-to-peer (P2P: one GPU writes into the other's memory through the PCIe switch or root
// complex), else through pinned host memory (SHM: the sender writes a host buffer, the receiver's kernel reads it back
// over PCIe). GeForce drivers report no peer access, so consumer cards run SHM.
enum class IntraNodeTransport { nvlink, pcie_p2p, pcie_shm };

const char* to_string(IntraNodeTransport transport);  // "nvlink", "pcie-p2p", "pcie-shm"
std::optional<IntraNodeTransport> parse_intra_node_transport(std::string_view text);

// PCIe line rate per direction: lanes × the generation's transfer rate × 128b/130b encoding / 8 bits (PCI-SIG: Gen3
// 8 GT/s, Gen4 16 GT/s, Gen5 32 GT/s; Gen6 64 GT/s with FLIT encoding, taken at the same 128/130). 0 for an unknown
// generation or no lanes.
double pcie_line_bytes_per_s(int generation, int lanes);

// The intra-node ring tier of a catalog GPU: its name, peak bus bandwidth and the fraction of it NCCL reaches
// (LinkTier's fields). GPUs without a transport field keep the entry's intra_node_bytes_per_s and bus efficiency.
struct IntraNodeBus {
  std::string name;
  double bus_bytes_per_s = 0;
  double efficiency = 0;
};
IntraNodeBus intra_node_bus(const GpuSpec& gpu);

}  // namespace shardplan
