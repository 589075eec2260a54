// HardwareProfile: every parameter of the cost model in one value — catalog defaults now, calibrated values later.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster.h"

namespace shardplan {

// One level of the interconnect hierarchy, as a ring collective sees it.
struct LinkTier {
  std::string name;             // "nvlink4", "ib-ndr"
  double latency_s = 0;         // α: per ring step
  double bus_bytes_per_s = 0;   // peak bus bandwidth per GPU (nccl-tests' busbw convention)
};

struct HardwareProfile {
  std::string source = "catalog";  // "catalog" or the calibration file it came from
  std::string device;              // GPU name
  int gpus_per_node = 1;
  int nodes = 1;

  // Compute: time = FLOPs / (peak × efficiency(FLOPs)), efficiency(f) = max_efficiency × f / (f + half_efficiency_flops)
  // — a saturating curve: small GEMMs cannot fill the machine (cf. NVIDIA's "GPU Performance Background" guide, the
  // wave-quantisation and tile-efficiency sections). Memory-bound work runs at hbm_bytes_per_s × memory_efficiency.
  double peak_bf16_flops = 0;
  double peak_fp16_flops = 0;
  double peak_fp32_flops = 0;
  double max_compute_efficiency = 0.75;  // large bf16 GEMMs reach ~70-80% of dense peak on A100/H100 (cuBLAS)
  double half_efficiency_flops = 2e9;    // a GEMM of ~2 GFLOP reaches half of the maximum efficiency
  double hbm_bytes_per_s = 0;
  double memory_efficiency = 0.8;        // STREAM-like kernels reach ~80% of the HBM datasheet bandwidth
  double pcie_bytes_per_s = 0;           // host ↔ device copies (CPU offload)

  // Communication: α-β per tier; messages smaller than comm_half_efficiency_bytes reach under half the bus bandwidth
  // (the shape of nccl-tests' busbw-vs-size curves); bus_efficiency is the fraction of link peak NCCL reaches.
  LinkTier intra_node;
  LinkTier inter_node;
  double comm_half_efficiency_bytes = 1 << 20;
  double bus_efficiency = 0.8;

  // Overlap: compute runs this much slower while a collective runs beside it (NCCL kernels take SMs and HBM
  // bandwidth; e.g. PyTorch FSDP2 notes and the Megatron-LM overlap studies report 5-20%).
  double overlap_compute_slowdown = 1.10;
  // And a collective progresses this much slower while its rank computes (Note [Collective slowdown] in
  // planner/simulator.cpp). 1 in the catalog: NCCL's slowdown under overlap depends on the kernels beside it; fitted
  // by `calibrate --trace` (on 2 CPU ranks sharing 2 cores, measured collectives ran 2-7x slower beside compute).
  double overlap_collective_slowdown = 1.0;

  std::int64_t context_overhead_bytes = 0;  // runtime context, library workspaces (memory model's overhead term)

  // Host time every compute-stream op that does work (forward, backward, recompute, optimizer step) costs on top of it: dispatch and bookkeeping between ops (a kernel
  // launch when the host is the bottleneck; in the CPU executor, the runner's per-op bookkeeping and MPI polling on
  // the same thread). 0 in the catalog: GPU launches run ahead of the device. Fitted by `calibrate --trace` from
  // the step time the per-op fits leave unexplained.
  double op_dispatch_overhead_s = 0;

  // Host time the issuing thread spends starting one collective, serialised on the compute stream where the schedule
  // issues it: on CPU ranks the MPI call, the gathered or reduced buffer's allocation and MPI's eager copies of small
  // messages, all on the thread that computes (measured: 0.15-0.2 ms per 0.4-0.8 MB collective on this project's
  // 2-core CI machine); on GPUs a kernel launch that runs ahead of the device, so 0 in the catalog. Fitted by
  // `calibrate --trace` from the gaps between compute ops in which collectives were issued (calibration.h).
  double collective_issue_overhead_s = 0;

  // Measured α-β of one collective on one group size and tier (calibration's fits.collectives): where one matches,
  // collective_cost uses it instead of the tier's α, bus bandwidth and efficiency curve, because collectives differ
  // on real stacks (a reduce-scatter also reduces; MPI and NCCL pick other algorithms per size and group).
  struct CollectiveFit {
    std::string collective;  // "all_gather", "reduce_scatter", "all_reduce"
    int ranks = 2;
    bool spans_nodes = false;
    double latency_s = 0;
    double bus_bytes_per_s = 0;
  };
  std::vector<CollectiveFit> collective_fits;
  const CollectiveFit* find_collective_fit(std::string_view collective, int ranks, bool spans_nodes) const;

  double peak_flops_for_bytes(int element_bytes) const;  // 4 → fp32 peak, 2 → bf16 peak
};

// The catalog's defaults for a cluster.
HardwareProfile profile_from_cluster(const Cluster& cluster);

// `shardplan.profile/v1`. A calibrated file adds "fits", "samples", "machine" and "date" (calibration.h writes
// them); the reader accepts and skips them, so old and new files apply the same way.
nlohmann::json to_json(const HardwareProfile& profile);
// Overrides the fields present in `document` (schema checked); InputError names the file and field.
HardwareProfile apply_profile_json(HardwareProfile base, const nlohmann::json& document, const std::string& origin);

}  // namespace shardplan
