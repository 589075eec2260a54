// Turning benchmark rows into calibration samples: collectives by tier, layer passes, GEMMs and memory-bound work.
#pragma once

#include <vector>

#include "calibration.h"
#include "comm_sweep.h"
#include "kernel_sweep.h"

namespace shardplan::bench {

// Collective rows go to intra_node or inter_node by their layout's tier; kernel rows to compute (layer passes), gemm
// or memory by their class. Names carry the size ("transformer_block bwd, 512 tokens").
CalibrationSamples bench_samples(const std::vector<CommRow>& comm_rows, const std::vector<KernelRow>& kernel_rows);

}  // namespace shardplan::bench
