// Timing a microbenchmark the nccl-tests way: warm-up, a barrier, n timed iterations, the slowest rank's mean.
#pragma once

#include <functional>
#include <vector>

#include "communicator.h"

namespace shardplan::bench {

struct TimingOptions {
  int warmup_iters = 5;  // nccl-tests' default -w 5
  int iters = 20;        // nccl-tests' default -n 20
};

// Runs `body` warmup_iters times, then — after a barrier of `world`, so every rank starts together — iters times back
// to back, and returns the mean seconds per iteration of the slowest rank of `world` (max over ranks). nccl-tests
// (src/common.cu) times n iterations the same way; its default -a 1 averages over ranks, -a 3 takes the max, which is
// what a step waiting for every rank sees. Collective over `world`.
double time_iterations_s(comm::Communicator& world, const TimingOptions& options, const std::function<void()>& body);

// Replaces each value with its maximum over the ranks of `world` (one float all-reduce: µs-resolution times only need
// float's 7 digits). Collective over `world`.
void max_over_ranks(comm::Communicator& world, std::vector<double>& values);

}  // namespace shardplan::bench
