// The CPU optimizer step of CPU offload: its time from a published CPU-Adam measurement and the node's host memory
// bandwidth, which all the node's ranks share (Note [CPU optimizer step]).
#pragma once

#include "hardware_profile.h"

namespace shardplan {

// Note [CPU optimizer step]: with CPU offload (FSDP's CPUOffload / FSDP2's CPUOffloadPolicy, DeepSpeed's
// ZeRO-Offload) the optimizer steps the fp32 shards in host memory. An AdamW step over one parameter streams its fp32
// master weight, gradient and two moments in and the weight and moments out: 28 bytes, 7 × 4 (the bytes the
// lowering's optimizer_step op carries, optimizer_bytes_per_element), a few FLOPs each, so it runs at the host's
// DRAM bandwidth — the node's, not the host link's (the step never crosses PCIe).
//
// Rate: ZeRO-Offload (Ren et al., USENIX ATC 2021, arXiv:2101.06840), Table 4: DeepSpeed's CPU-Adam (AVX512, all
// cores) steps 10 billion parameters in 2.57 s on the host of a DGX-2 (the paper's Table 2: 2 × Intel Xeon Platinum
// 8168, 24 cores each), 6.4× faster than torch.optim.Adam on that CPU at 1 billion. That is 3.9e9 parameters/s ×
// 28 bytes = 109 GB/s of the host's 256 GB/s peak (each 8168 has 6 channels of DDR4-2666, 6 × 21.33 GB/s = 128 GB/s,
// Intel ARK), a fraction kCpuAdamBandwidthFraction = 0.43 of the datasheet peak, which other hosts are taken to reach
// too. torch.optim.AdamW(foreach) on CPU, FSDP's default, is slower (the paper's PT-CPU: 5–6.4×): this is a lower
// bound of the step for it. --optimizer cpu-adamw says the run uses DeepSpeed's CPU-Adam itself
// (deepspeed.ops.adam.DeepSpeedCPUAdam, what ZeRO-Offload measured, and what DeepSpeed builds for an AdamW config with
// offload_optimizer), so the same charge is its step time rather than a bound; its states are AdamW's (fp32 m and v,
// optimizer_state_count 2) and live on the host only, so it is refused without CPU offload (check_optimizer_offload).
//
// Sharing: every rank of a node steps its own shard at the same time (after the same reduce-scatter), so a rank gets
// 1 / gpus_per_node of the node's bandwidth: the step takes the node's parameters × bytes / bandwidth — it scales
// with the parameters per node, not per rank alone.
inline constexpr double kCpuAdamBytesPerParam = 28;
inline constexpr double kCpuAdamParamsPerS = 10e9 / 2.57;  // ZeRO-Offload Table 4, 10 B parameters
inline constexpr double kDgx2HostMemoryBytesPerS = 2 * 6 * 21.328e9;  // 2 × Xeon Platinum 8168, 6 × DDR4-2666
inline constexpr double kCpuAdamBandwidthFraction =
    kCpuAdamParamsPerS * kCpuAdamBytesPerParam / kDgx2HostMemoryBytesPerS;

// One rank's optimizer step in host memory over `step_bytes` (its shard's elements × the optimizer's bytes per
// element), all profile.gpus_per_node ranks of its node stepping at once over profile.host_memory_bytes_per_s.
double host_optimizer_step_time_s(double step_bytes, const HardwareProfile& profile);

}  // namespace shardplan
