// Compute cost, op by op: a layer pass's kernels (pass_kernels.h) timed as PyTorch runs them on one stream — GEMMs by
// shape, flash attention by sequence length, memory-bound kernels at the achievable HBM bandwidth — plus the optimizer
// step, buffer fills and host copies.
#pragma once

#include <cstdint>

#include "hardware_profile.h"
#include "pass_kernels.h"
#include "training.h"

namespace shardplan {

// One GEMM (HardwareProfile's compute notes): max((F + f½) / (peak × max_compute_efficiency × clock_fraction),
// bytes of A, B and C / memory rate) — a roofline per GEMM with a fixed cost per kernel that small GEMMs cannot hide.
double gemm_time_s(const GemmCall& gemm, int element_bytes, const HardwareProfile& profile);

// One flash attention kernel: FLOPs / (peak × efficiency × clock_fraction × s / (s + s½)), the forward or backward
// plateau, lower for head dimensions of 64 and below.
double attention_time_s(const AttentionCall& attention, int element_bytes, const HardwareProfile& profile);

// The share of attention's plateau rate a kernel reaches: s / (s + s½), lower for head dimensions of 64 and below.
double attention_rate_share(const AttentionCall& attention, const HardwareProfile& profile);

// Memory-bound work: bytes / (hbm_bytes_per_s × memory_efficiency).
double memory_time_s(double bytes, const HardwareProfile& profile);
// A layer pass's memory-bound kernels: at elementwise_bytes_per_s where set (calibrated), else memory_time_s.
double elementwise_time_s(double bytes, const HardwareProfile& profile);

// A pass's time, term by term. Kernels on one stream run one after another, so their times add (no per-layer
// roofline max); the host must also launch them, so the pass takes at least kernels × kernel_dispatch_s.
struct PassTime {
  double gemm_s = 0;
  double attention_s = 0;
  double memory_s = 0;
  double collective_s = 0;  // tensor parallelism's collectives, on the stream (Note [Tensor-parallel collectives])
  double dispatch_s = 0;  // the host's launch time for the pass's kernels
  double total_s = 0;     // max(gemm + attention + memory + collective, dispatch)
};
PassTime pass_time(const PassKernels& kernels, int compute_element_bytes, const HardwareProfile& profile);
double pass_time_s(const PassKernels& kernels, int compute_element_bytes, const HardwareProfile& profile);

// The optimizer step on this rank's shard is bound by HBM bandwidth: it reads and writes parameters and states and
// reads gradients (fused AdamW touches each byte once: apex FusedAdam, torch `fused=True`).
double optimizer_step_time_s(std::int64_t shard_elements, const PrecisionRecipe& precision, OptimizerKind optimizer,
                             const HardwareProfile& profile);

// Zero-filling a fresh buffer (a unit's full-size gradient before its first backward op: the CPU runner's
// value-initialised vector, the GPU runner's cudaMemsetAsync): one streaming write of its bytes at the memory rate,
// like STREAM's fill.
double buffer_fill_time_s(std::int64_t bytes, const HardwareProfile& profile);

// Host ↔ device copy over PCIe (CPU offload).
double host_copy_time_s(std::int64_t bytes, const HardwareProfile& profile);

}  // namespace shardplan
