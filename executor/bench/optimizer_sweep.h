// The memory-bound sweep of `calibrate --bench`: the CPU runtime's AdamW step on flat shards of several sizes, the
// op the cost model times by bytes moved (compute_cost.h, optimizer_step_time_s).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "bench_timer.h"
#include "communicator.h"
#include "kernel_sweep.h"

namespace shardplan::bench {

struct OptimizerSweepOptions {
  std::vector<std::int64_t> shard_elements = {1 << 14, 1 << 16, 1 << 18, 1 << 20};
  TimingOptions timing{2, 10};
};

// One KernelClass::memory row per shard size: bytes = elements × the fused-AdamW bytes per element that
// optimizer_step_time_s charges for fp32 (28). Collective over `world` (slowest rank's time).
std::vector<KernelRow> run_optimizer_sweep(const OptimizerSweepOptions& options, comm::Communicator& world,
                                           const std::function<void(const KernelRow&)>& on_row = {});

}  // namespace shardplan::bench
