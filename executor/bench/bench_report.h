// The text tables `calibrate --bench` prints: collectives as nccl-tests prints them, kernels, and the fits.
#pragma once

#include <string>

#include "calibration.h"
#include "comm_sweep.h"
#include "kernel_sweep.h"

namespace shardplan::bench {

// nccl-tests' columns (src/common.cu): size and count, time per iteration in µs, algbw and busbw in GB/s (10⁹ B/s),
// plus which ranks ran it and whether the groups span nodes. Each line ends in '\n'; headers start with '#'.
std::string comm_table_header();
std::string format_comm_row(const CommRow& row);

// kernel, class, size (tokens or elements), work (GFLOP or MB), time(us), rate (GFLOP/s or GB/s).
std::string kernel_table_header();
std::string format_kernel_row(const KernelRow& row);

// The fitted parameters with their residuals: per collective × group size × tier, pooled per tier (what the
// profile takes), compute (layer passes), GEMMs and memory-bound work.
std::string format_fits(const Calibration& calibration);

}  // namespace shardplan::bench
