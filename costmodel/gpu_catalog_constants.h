// Internal to the builtin catalog's data files (gpu_catalog_*.cpp): the constants and Notes their entries share, and
// the functions each file adds its entries with.
#pragma once

#include <cstdint>

namespace shardplan {

class HardwareCatalog;

namespace catalog_data {

constexpr std::int64_t mib(std::int64_t count) { return count << 20; }
constexpr std::int64_t gib(std::int64_t count) { return count << 30; }
constexpr std::int64_t tib(std::int64_t count) { return count << 40; }

// Note [Node host memory]: the host memory of one node of each GPU's usual system, against which CPU offload plans
// are checked (Note [Host memory] in planner/host_memory.h). Vendor reference systems where there is one (DGX
// datasheets list "System Memory"; their DIMMs are binary sizes, so "1TB" is 1 TiB), a cloud instance otherwise.
// Nodes differ (HGX boards ship in 1, 2 and 4 TB servers): a cluster file's "host_memory_gib_per_node" says what
// one really has.

// Note [Context overhead]: the CUDA/ROCm context, cuBLAS/hipBLAS workspaces and NCCL/RCCL channel buffers take memory
// that training cannot use. ~1 GiB is what `torch.cuda.mem_get_info()` loses before the first tensor on a datacenter GPU
// with NCCL initialised; it is a calibratable constant (calibration replaces it with the measured value).
constexpr std::int64_t kGpuContextOverheadBytes = gib(1);

// Note [Prices]: approximate 2025 on-demand per-GPU-hour list prices of public GPU clouds (Lambda, RunPod, CoreWeave
// class providers). They drift month to month and vary by provider — defaults for cost estimates, meant to be overridden
// with "price_per_gpu_hour" in a cluster or catalog file. 0 where no public cloud rents the part (as for hardware one
// owns: costs then read $0 until a price is given).

// Note [Intra-node bandwidth]: NVIDIA quotes NVLink as total bidirectional bandwidth per GPU; a ring step pushes one
// direction, so the catalog stores half. Same for PCIe ("64 GB/s" Gen4 x16 bidirectional = 32 GB/s per direction).

// Note [Latency α]: per ring step, not the wire latency (Note [NCCL latency] for the intra-node links). Calibration
// fits α from measured small-message collectives.

// Note [NCCL latency]: NCCL's own ring model (NVIDIA/nccl src/graph/tuning.cc, baseLat and hwLat for the Simple
// protocol that carries large messages): 8.4 µs per collective call, 3.4 µs per step over NVLink, 5.7 µs over PCIe.
constexpr double kNcclBaseLatencyS = 8.4e-6;
constexpr double kNvlinkHopLatencyS = 3.4e-6;
constexpr double kPcieHopLatencyS = 5.7e-6;
// Note [Collective size curve]: XLA's measured 8 × H100 all-gather busbw (default_collective_perf_table, sm_90: 113,
// 179, 275, 322, 337 GB/s at 8, 16, 64, 256, 512 MB) is fitted within 2% by NCCL's latency above plus
// (S + 4 MiB) / busbw: a message reaches half the bandwidth left after its latency at 4 MiB.
constexpr double kCommHalfEfficiencyBytes = 4.0 * (1 << 20);
// Note [Eager dispatch]: PyTorch's host time per eager op with autograd is 5-7 µs (pytorch/pytorch#41383: a scalar op
// with autograd; ~2 µs without), so a pass cannot run faster than its kernel count × 5 µs.
constexpr double kEagerDispatchS = 5e-6;

// The entries beyond gpu_catalog_data.cpp's, one function per file (HardwareCatalog::builtin() calls them).
void add_nvidia_volta_ampere_ada(HardwareCatalog& catalog);  // gpu_catalog_more.cpp
void add_nvidia_hopper_blackwell_more(HardwareCatalog& catalog);  // gpu_catalog_more_hopper.cpp
void add_amd_more(HardwareCatalog& catalog);  // gpu_catalog_more_amd.cpp

}  // namespace catalog_data
}  // namespace shardplan
