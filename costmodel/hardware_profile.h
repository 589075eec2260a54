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
  double latency_s = 0;         // α: per ring step over this tier (NCCL's per-hop latency)
  // Peak bus bandwidth (nccl-tests' busbw convention) of a ring over this tier: per GPU for the intra-node link; for
  // the inter-node tier, the node's whole network (Note [Rails] in collective_cost.cpp).
  double bus_bytes_per_s = 0;
  double efficiency = 0.8;      // the fraction of bus_bytes_per_s NCCL reaches at large messages (nccl-tests)
};

struct HardwareProfile {
  std::string source = "catalog";  // "catalog" or the calibration file it came from
  std::string device;              // GPU name
  int gpus_per_node = 1;
  int nodes = 1;

  // Compute: the op-level model (compute_cost.h). A pass's kernels run one after another on the stream:
  // - a GEMM of F FLOPs takes (F + half_efficiency_flops) / (peak × max_compute_efficiency × clock_fraction), or its
  //   operands' bytes at the memory rate when that is longer (a roofline per GEMM);
  // - flash attention runs at peak × attention_{forward,backward}_efficiency × clock_fraction × s / (s + s½);
  // - memory-bound kernels move their bytes at hbm_bytes_per_s × memory_efficiency;
  // - and a pass takes at least its kernel count × kernel_dispatch_s, the host's time to launch them.
  double peak_bf16_flops = 0;
  double peak_fp16_flops = 0;
  double peak_fp32_flops = 0;
  double peak_fp8_flops = 0;  // dense float8 tensor-core rate (Note [Float8 training]); 0: the GPU has none
  double max_compute_efficiency = 0.75;  // large GEMMs' plateau (cuBLAS: 0.8 of the dense peak on A100/H100)
  double half_efficiency_flops = 4.5e9;  // per GEMM: ≈ 6 µs of the plateau rate (XLA's H100 GEMM table)
  // Float8 GEMMs (Note [Float8 training] in precision.h) take the fp8 peak with their own plateau and fixed cost where
  // the GPU's were measured (cuBLASLt's fp8 kernels are not its bf16 ones); 0: the two values above.
  double fp8_compute_efficiency = 0;
  double fp8_half_efficiency_flops = 0;
  double clock_fraction = 1.0;           // sustained tensor clock under training load / the clock the peak assumes
  double attention_forward_efficiency = 0.34;   // FlashAttention-2 on H100 (the FlashAttention-3 paper, Fig. 5)
  double attention_backward_efficiency = 0.32;
  double attention_half_seq_len = 350;
  // The older Triton FlashAttention (flash_attn_triton; TrainingConfig::attention_kernel), forward and backward alike:
  // 0.44 of FlashAttention-2's rate on A100 (FlashAttention-2 paper, Fig. 4c), the ratio taken where unmeasured.
  double triton_attention_efficiency = 0.44 * 0.34;
  double triton_attention_half_seq_len = 120;
  double kernel_dispatch_s = 0;          // host time per kernel launch (eager PyTorch); 0 for CPU ranks
  double hbm_bytes_per_s = 0;
  double memory_efficiency = 0.8;        // STREAM Triad reaches ~0.8-0.9 of the HBM datasheet bandwidth
  // The rate at which a layer pass's memory-bound kernels move the bytes pass_kernels.h counts for them; 0: the STREAM
  // rate above. Calibration fits it from the layer passes themselves, since an executor's kernels need not be
  // PyTorch eager's (the CPU runtime fuses its elementwise work into a few loops).
  double elementwise_bytes_per_s = 0;
  double pcie_bytes_per_s = 0;           // host ↔ device copies (CPU offload)
  // One node's host DRAM bandwidth (datasheet peak), shared by its ranks' CPU optimizer steps (Note [CPU optimizer
  // step] in host_optimizer.h).
  double host_memory_bytes_per_s = 0;

  // Communication: NCCL's ring model per tier (collective_cost.h); messages smaller than comm_half_efficiency_bytes
  // reach under half the tier's bus bandwidth beyond what the latency explains (the shape of nccl-tests' and XLA's
  // measured busbw-vs-size curves).
  LinkTier intra_node;
  LinkTier inter_node;
  double comm_half_efficiency_bytes = 1 << 20;
  double collective_base_latency_s = 0;  // per collective call (NCCL's baseLat), before the per-hop latencies
  double nvls_bus_bytes_per_s = 0;       // NVLink SHARP all-reduce within a node (0: none)

  // Overlap (Note [Overlap slowdown by kernel kind] in overlap_slowdown.h): compute runs slower while a collective runs
  // beside it — NCCL's kernels hold 16-32 of an H100's 132 SMs (one CTA per channel) and take HBM bandwidth — by how
  // much depending on the kernel: a GEMM, flash attention, or memory-bound work (elementwise kernels, zero-fills,
  // tensor parallelism's collectives on the compute stream, the optimizer step). The catalog sets them per GPU from
  // kernel-level traces; elsewhere all three are the average Lee et al. measured over GPT and Llama training kernels on
  // A100, H100, MI250 and MI210, overlapped compute taking 18.9% longer ("Characterizing Compute-Communication Overlap
  // in GPU-Accelerated Distributed Deep Learning", arXiv 2507.03114).
  double overlap_gemm_slowdown = 1.189;
  double overlap_attention_slowdown = 1.189;
  double overlap_memory_slowdown = 1.189;
  // The least of the three: what a lower bound may assume of any compute op beside a collective (planner/
  // compute_floor.cpp). set_overlap_slowdowns keeps it so; a profile file's single legacy key sets all four.
  double overlap_compute_slowdown = 1.189;
  void set_overlap_slowdowns(double gemm, double attention, double memory);
  void set_overlap_slowdown(double every_kind) { set_overlap_slowdowns(every_kind, every_kind, every_kind); }
  // And a collective progresses this much slower while its rank computes (Note [Collective slowdown] in
  // planner/simulator.cpp). 1 in the catalog: NCCL's slowdown under overlap depends on the kernels beside it; fitted
  // by `calibrate --trace` (on 2 CPU ranks sharing 2 cores, measured collectives ran 2-7x slower beside compute).
  double overlap_collective_slowdown = 1.0;

  std::int64_t context_overhead_bytes = 0;  // runtime context, library workspaces (memory model's overhead term)
  // The device's memory (the catalog GPU's), which bounds what the caching allocator can reserve (Note [Reserved
  // memory] in planner/simulator.cpp); 0: unknown, no bound.
  std::int64_t device_memory_bytes = 0;

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

  // The catalog rates no published measurement backs for this GPU (unmeasured_rates.h): outputs say "unmeasured".
  std::vector<std::string> unmeasured_rates;
  const CollectiveFit* find_collective_fit(std::string_view collective, int ranks, bool spans_nodes) const;

  double peak_flops_for_bytes(int element_bytes) const;  // 4 → fp32 peak, 2 → bf16 peak, 1 → fp8 peak
};

// The catalog's defaults for a cluster.
HardwareProfile profile_from_cluster(const Cluster& cluster);

// `shardplan.profile/v1`. A calibrated file adds "fits", "samples", "machine" and "date" (calibration.h writes
// them); the reader accepts and skips them, so old and new files apply the same way.
nlohmann::json to_json(const HardwareProfile& profile);
// Overrides the fields present in `document` (schema checked); InputError names the file and field.
HardwareProfile apply_profile_json(HardwareProfile base, const nlohmann::json& document, const std::string& origin);

}  // namespace shardplan
