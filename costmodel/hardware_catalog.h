// The hardware catalog: accelerator types and inter-node fabrics with their published numbers, plus user overrides.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardplan {

struct GpuSpec {
  std::string name;                   // "H100-80GB"
  std::string description;            // "NVIDIA H100 SXM5 80GB"
  std::int64_t memory_bytes = 0;      // usable device memory as the driver reports it
  double peak_bf16_flops = 0;         // dense, no sparsity, FLOP/s
  double peak_fp16_flops = 0;
  double peak_fp32_flops = 0;         // plain FP32 (not TF32)
  double peak_fp8_flops = 0;          // dense float8 tensor cores, FLOP/s; 0: none (Note [Float8 training])
  double hbm_bytes_per_s = 0;
  std::string intra_node_link;        // "NVLink4", "PCIe Gen4 x16", "Infinity Fabric"
  double intra_node_bytes_per_s = 0;  // per GPU, per direction (what a ring step can push)
  double intra_node_latency_s = 0;    // per ring step (α)
  // How NCCL moves data inside a node (Note [Intra-node transport] in intra_node_transport.cpp): "nvlink" (or empty:
  // intra_node_bytes_per_s and intra_node_bus_efficiency as given), "pcie-p2p" or "pcie-shm", with the PCIe link's
  // generation and lanes, from which the ring's bus bandwidth follows (intra_node_bus()).
  std::string intra_node_transport;
  int pcie_generation = 0;            // 3, 4, 5, 6; 0: not given
  int pcie_lanes = 0;                 // 16, 8, ...; 0: not given
  double pcie_bytes_per_s = 0;        // host link per direction, for CPU offload copies
  std::string default_fabric;         // the inter-node fabric usually paired with it
  int default_gpus_per_node = 8;
  double price_per_gpu_hour = 0;      // USD, a default the user can override
  std::int64_t context_overhead_bytes = 0;  // runtime context + library workspaces that training cannot use
  // Kernel-level rates (the op-level compute model, compute_cost.h; HardwareProfile says what each means), each from a
  // published kernel measurement cited where the entry sets it; 0 keeps HardwareProfile's default.
  double max_compute_efficiency = 0;         // large-GEMM plateau, fraction of the dense peak
  double half_efficiency_flops = 0;          // per GEMM: the FLOPs at which one reaches half the plateau
  double fp8_compute_efficiency = 0;         // float8 GEMMs' plateau, fraction of the fp8 peak (0: the above)
  double fp8_half_efficiency_flops = 0;      // float8 GEMMs' half-plateau FLOPs (0: the above)
  double attention_forward_efficiency = 0;   // flash attention's plateau, fraction of the dense peak
  double attention_backward_efficiency = 0;
  double attention_half_seq_len = 0;         // the sequence length at which attention reaches half its plateau
  double triton_attention_efficiency = 0;    // the Triton FlashAttention kernel's plateau (0: 0.44 of the flash one)
  double memory_efficiency = 0;              // memory-bound kernels: fraction of hbm_bytes_per_s (STREAM Triad)
  double clock_fraction = 0;                 // sustained tensor clock under training load / the peak's clock
  // Compute beside a collective, by kernel kind (Note [Overlap slowdown by kernel kind] in overlap_slowdown.h): time
  // overlapped / time alone. A catalog file's single "overlap_compute_slowdown" sets all three.
  double overlap_gemm_slowdown = 0;
  double overlap_attention_slowdown = 0;
  double overlap_memory_slowdown = 0;
  double kernel_dispatch_s = -1;             // host time per eager kernel launch; -1 keeps the default
  double intra_node_bus_efficiency = 0;      // nccl-tests busbw / intra_node_bytes_per_s for ring collectives
  double nvls_bus_bytes_per_s = 0;           // NVLink SHARP all-reduce busbw within a node (0: no NVLS)
  double collective_base_latency_s = 0;      // per collective call, before the per-hop latencies (NCCL's baseLat)
  double comm_half_efficiency_bytes = 0;     // message size at half the tier's bandwidth beyond the latency
  // Host (CPU) memory of one node of this GPU's usual system, for CPU offload (Note [Host memory] in
  // planner/host_memory.h); 0: unknown, offload plans are then not checked against it.
  std::int64_t host_memory_bytes_per_node = 0;
  // Peak DRAM bandwidth of that node's CPUs (sockets × channels × transfer rate × 8 bytes), for the CPU optimizer step
  // of CPU offload (Note [CPU optimizer step] in host_optimizer.h); 0: kDefaultHostMemoryBytesPerS.
  double host_memory_bytes_per_s_per_node = 0;
};

// A node whose host is not described: two sockets of 8 DDR4-3200 channels (2 × 8 × 25.6 GB/s), the DGX A100's
// 2 × AMD EPYC 7742 (AMD EPYC 7742 specifications: 8 channels, DDR4-3200, 204.8 GB/s per socket).
inline constexpr double kDefaultHostMemoryBytesPerS = 2 * 204.8e9;

struct FabricSpec {
  std::string name;                 // "ib-ndr"
  std::string description;          // "InfiniBand NDR 400 Gb/s"
  double bytes_per_s_per_gpu = 0;   // network bandwidth per GPU per direction (one NIC per GPU unless nics_per_node)
  double latency_s = 0;             // per ring step across nodes (α)
  // Rails (Note [Rails] in collective_cost.cpp): NICs per node and each one's rate per direction; 0 = one NIC per GPU
  // at bytes_per_s_per_gpu. A node's network bandwidth is nics_per_node × bytes_per_s_per_nic.
  int nics_per_node = 0;
  double bytes_per_s_per_nic = 0;
  double nic_efficiency = 0;        // nccl-tests busbw per NIC / its line rate; 0 keeps the default
  double node_bytes_per_s(int gpus_per_node) const;
};

// All known GPUs and fabrics. `builtin()` holds the published numbers (each with its source at the definition);
// `merge_user_file` adds or overrides entries from a JSON file (`shardplan.catalog/v1`).
class HardwareCatalog {
 public:
  static HardwareCatalog builtin();

  // File format: {"schema": "shardplan.catalog/v1", "gpus": [{"name": ..., fields of GpuSpec ...}],
  // "fabrics": [...]}. An entry with a known name overrides only the fields it gives; a new name must give
  // memory_bytes, peak_bf16_flops and hbm_bytes_per_s. Throws InputError naming file and field.
  void merge_user_file(const std::string& path);
  void merge_user_json(const nlohmann::json& document, const std::string& origin);
  // The same for a catalog object nested in another document (a cluster file's "catalog"): errors name
  // `field_path` + the field, e.g. "cluster.json: field 'catalog.gpus[0].memory_bytes': ...".
  void merge_user_json(const nlohmann::json& document, const std::string& origin, const std::string& field_path);

  const GpuSpec& gpu(const std::string& name) const;       // InputError with closest names when unknown
  const FabricSpec& fabric(const std::string& name) const; // InputError with closest names when unknown
  std::vector<std::string> gpu_names() const;
  std::vector<std::string> fabric_names() const;
  const std::vector<GpuSpec>& gpus() const { return gpus_; }
  const std::vector<FabricSpec>& fabrics() const { return fabrics_; }

  void add_gpu(GpuSpec spec);        // replaces an entry of the same name
  void add_fabric(FabricSpec spec);  // replaces an entry of the same name

 private:
  std::vector<GpuSpec> gpus_;
  std::vector<FabricSpec> fabrics_;
};

class JsonObjectReader;
// Reads "host_memory_bytes_per_node" or "host_memory_gib_per_node" (not both) of a catalog GPU entry or a cluster
// file into `bytes_per_node`, leaving it as it is when neither is given. InputError naming the field.
void apply_host_memory_fields(const JsonObjectReader& entry, std::int64_t& bytes_per_node);

nlohmann::json to_json(const GpuSpec& gpu);
nlohmann::json to_json(const FabricSpec& fabric);

}  // namespace shardplan
