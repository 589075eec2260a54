// overlap_slowdown: how much slower a compute op runs beside a collective, from its kernels' kinds.
#pragma once

#include "compute_cost.h"
#include "hardware_profile.h"

namespace shardplan {

// Note [Overlap slowdown by kernel kind]: NCCL's kernels take SMs and HBM bandwidth from whatever computes beside
// them, and kernels feel that differently. In one A100 trace of GPT training a GEMM beside an all-gather took 2.08 ms
// against 1.18 alone, flash attention 0.33 against 0.18, an elementwise kernel 0.05 against 0.02
// (NVIDIA/nccl#1428); on H100, matmuls overlapped by NCCL collectives in Llama3 8B training ran 30-40 % slower
// (pytorch/pytorch#179937; a synthetic one-wave GEMM beside an all-gather lost more, 80 % to 47 % MFU, NVIDIA developer
// forum thread 337991: the catalog takes the training run's, gpu_catalog_data.cpp). So the simulator stretches
// a compute op's overlapped part (Note [Communication busy time]) by its own factor: a layer pass by its kernels'
// slowdowns weighted by each kind's time alone (pass_time's terms, what pass_time_s adds up), the zero-fill of a
// fresh gradient buffer and tensor parallelism's collectives on the compute stream counting as memory-bound; the
// optimizer step is memory-bound. The factor is computed once per op shape with its duration (op_durations.h), so
// the simulator, the pipeline simulator and the fragment placer read the same value.

// A layer pass whose kernels take `time` alone and whose gradient zero-fill takes `fill_s`: its kernels' slowdowns
// weighted by their times (the memory-bound one for a pass without kernel time).
double pass_overlap_slowdown(const PassTime& time, double fill_s, const HardwareProfile& profile);

}  // namespace shardplan
