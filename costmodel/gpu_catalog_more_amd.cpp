// Builtin catalog entries for AMD Instinct parts beyond gpu_catalog_data.cpp's MI300X: MI250X (one GCD per entry),
// MI325X and MI355X.
//
// Sources as in gpu_catalog_data.cpp; "not verified" marks a datasheet value we could not read in a stored copy of the
// datasheet or a secondary source quoting it, "unmeasured" a kernel rate left at the profile's default.
#include "gpu_catalog_constants.h"
#include "hardware_catalog.h"

namespace shardplan::catalog_data {
namespace {

// Fills what every entry of this file shares: the context overhead, RCCL's fixed costs taken as NCCL's, PyTorch's
// dispatch floor, and hops over xGMI taken as NVLink's (as for MI300X).
GpuSpec amd_gpu(const char* name, const char* description) {
  GpuSpec gpu{};
  gpu.name = name;
  gpu.description = description;
  gpu.intra_node_link = "Infinity Fabric";
  gpu.intra_node_latency_s = kNvlinkHopLatencyS;  // Note [NCCL latency]; RCCL on xGMI taken as NCCL on NVLink
  gpu.context_overhead_bytes = kGpuContextOverheadBytes;  // Note [Context overhead]
  gpu.kernel_dispatch_s = kEagerDispatchS;                // Note [Eager dispatch]
  gpu.collective_base_latency_s = kNcclBaseLatencyS;
  gpu.comm_half_efficiency_bytes = kCommHalfEfficiencyBytes;  // Note [Collective size curve]
  return gpu;
}

void add_cdna2(HardwareCatalog& catalog) {
  // AMD Instinct MI250X — one entry is one GCD, one rank. An MI250X OAM package holds two Graphics Compute Dies that
  // ROCm and PyTorch present as two devices of 64 GB each (ROCm "MI250 microarchitecture": "two GCDs, each of which
  // constitutes one GPU device in the system"; Frontier: "each physical GPU appears as two separate GPUs",
  // glennklockwood.com), so "8xMI250X" is one Frontier node of four packages. Per package (ml-engineering TFLOPS table,
  // from AMD's MI250X page): BF16/FP16 matrix 383 TFLOPS, FP32 vector 47.9 TFLOPS; 128 GB HBM2e at 3.2 TB/s. An entry
  // holds half of each ("1.6 TB/sec per GCD", ROCm).
  GpuSpec gcd = amd_gpu("MI250X", "AMD Instinct MI250X, one GCD (half an OAM package) 64GB");
  gcd.memory_bytes = gib(64);           // 64 GB HBM2e per GCD; rocm-smi reads it in GiB as for MI300X (not verified)
  gcd.peak_bf16_flops = 383e12 / 2;
  gcd.peak_fp16_flops = 383e12 / 2;
  gcd.peak_fp32_flops = 47.9e12 / 2;    // vector FP32 (packed FP32 doubles it)
  gcd.hbm_bytes_per_s = 1.6e12;
  // The two GCDs of a package share four xGMI links (200 GB/s per direction), but GCDs of different packages one
  // 16-wide link at 25 GT/s, "50 GB/sec per link" per direction (two for some pairs) (ROCm MI250 microarchitecture,
  // node-level architecture): a ring over 8 GCDs is paced by one link.
  gcd.intra_node_bytes_per_s = 50e9;
  // Frontier's CPU-GCD Infinity Fabric: "36+36 GB/s" (ORNL's Crusher overview as reported); PCIe Gen4 x16 hosts: 32e9.
  gcd.pcie_bytes_per_s = 36e9;
  gcd.default_fabric = "slingshot-200g";  // Frontier EX235a: 4 × Slingshot-11 200 Gb/s per node
  gcd.default_gpus_per_node = 8;          // Frontier: 4 MI250X = 8 GCDs per node
  gcd.price_per_gpu_hour = 0;             // no public cloud rents it: unknown (Note [Prices])
  // Kernel rates unmeasured: no GEMM, attention, STREAM or RCCL measurement per GCD was found in the store.
  gcd.host_memory_bytes_per_node = gib(512);  // Frontier / Crusher node: 512 GB DDR4 (glennklockwood.com, ORNL)
  catalog.add_gpu(gcd);
}

void add_cdna3_cdna4(HardwareCatalog& catalog) {
  // AMD Instinct MI325X: MI300X's CDNA 3 compute ("MI325X is the same compute as MI300X", ml-engineering TFLOPS table:
  // bf16 1,300 — AMD's 1,307.4 as for MI300X — fp32 163.4) with 256 GB HBM3e at 6 TB/s (its memory table). Eight OAMs
  // on a fully meshed Infinity Fabric baseboard, taken as MI300X's 7 links × 64 GB/s per direction (not verified for
  // MI325X); host link PCIe Gen5 x16 (MLCommons' AMD submission guide: "PCIe Gen5 x16" for MI300X and MI325X).
  GpuSpec mi325x = amd_gpu("MI325X", "AMD Instinct MI325X 256GB (OAM)");
  mi325x.memory_bytes = gib(256);       // ROCm GPU specifications: VRAM 256 GiB
  mi325x.peak_bf16_flops = 1307.4e12;   // dense
  mi325x.peak_fp16_flops = 1307.4e12;
  mi325x.peak_fp32_flops = 163.4e12;    // vector
  mi325x.peak_fp8_flops = 2614.9e12;    // as MI300X (the table's fp8 2,610 for both; AMD's 2,614.9); GEMM unmeasured
  mi325x.hbm_bytes_per_s = 6e12;        // HBM3e
  mi325x.intra_node_bytes_per_s = 448e9;  // 7 links × 64 GB/s per direction (fully connected 8-GPU mesh)
  mi325x.pcie_bytes_per_s = 64e9;       // PCIe Gen5 x16, 128 GB/s bidirectional / 2
  mi325x.default_fabric = "roce-400g";  // as MI300X: 400 Gb/s RoCE NICs, one per GPU (not verified for MI325X)
  mi325x.default_gpus_per_node = 8;     // AMD Instinct MI325X platform: 8 OAMs (UBB 2.0)
  mi325x.price_per_gpu_hour = 2.25;     // Note [Prices] (approximate, not verified)
  // GEMM: 784.9 TFLOP/s with TunableOp at 1000 W (MAMF table, newer stored version). Attention, STREAM and RCCL:
  // unmeasured.
  mi325x.max_compute_efficiency = 784.9 / 1307.4;
  mi325x.host_memory_bytes_per_node = tib(2);  // no MI325X reference system found in the store: 2 TB, not verified
  catalog.add_gpu(mi325x);

  // AMD Instinct MI355X (CDNA 4, 1,400 W): BF16/FP16 matrix 2.5 PFLOPS dense (AMD's rounding of 2,516.6 = 2,400 MHz ×
  // 1,024 matrix cores × 512 FMA × 2, ml-engineering), FP32 157.3 TFLOPS, 288 GB HBM3e at 8 TB/s. Infinity Fabric in
  // the 8-GPU mesh: 7 links of ~153.6 GB/s bidirectional each (humeconsulting.co MI355X analysis; not verified against
  // AMD's page), 537.6 GB/s per direction.
  GpuSpec mi355x = amd_gpu("MI355X", "AMD Instinct MI355X 288GB (OAM)");
  mi355x.memory_bytes = gib(288);       // ROCm GPU specifications: VRAM 288 GiB
  mi355x.peak_bf16_flops = 2500e12;     // dense
  mi355x.peak_fp16_flops = 2500e12;
  mi355x.peak_fp32_flops = 157.3e12;    // vector
  mi355x.peak_fp8_flops = 5000e12;      // ml-engineering TFLOPS table, AMD's dense OCP-FP8 figure; GEMM unmeasured
  mi355x.hbm_bytes_per_s = 8e12;        // HBM3e
  mi355x.intra_node_bytes_per_s = 7 * 153.6e9 / 2;
  mi355x.pcie_bytes_per_s = 64e9;       // PCIe Gen5 x16 (not verified)
  mi355x.default_fabric = "roce-400g";  // 400 Gb/s NICs per GPU on MI350-series platforms (not verified)
  mi355x.default_gpus_per_node = 8;     // 8-OAM platforms (e.g. Dell PowerEdge XE9785L)
  mi355x.price_per_gpu_hour = 2.95;     // Note [Prices] (approximate, not verified)
  // GEMM: 1,565 TFLOP/s (MAMF table, newer stored version; PyTorch 2.8 on ROCm 7.0.2, TunableOp off; the table's own
  // "Theory" column reads 2,300). Attention, STREAM and RCCL: unmeasured.
  mi355x.max_compute_efficiency = 1565.0 / 2500.0;
  mi355x.host_memory_bytes_per_node = tib(2);  // no MI355X reference system found in the store: 2 TB, not verified
  catalog.add_gpu(mi355x);
}

}  // namespace

void add_amd_more(HardwareCatalog& catalog) {
  add_cdna2(catalog);
  add_cdna3_cdna4(catalog);
}

}  // namespace shardplan::catalog_data
