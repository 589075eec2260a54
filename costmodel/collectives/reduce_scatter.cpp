// The ring reduce-scatter plug-in: its ring steps and its nccl-tests busbw factor.
#include "collective_cost.h"

namespace shardplan {
namespace {

// Ring reduce-scatter: n−1 steps, each rank sends one 1/n chunk of its input per step and adds the chunk it receives,
// so every link carries (n−1)/n · S (S = the full input). nccl-tests doc/PERFORMANCE.md ("ReduceScatter"):
// busbw = algbw × (n−1)/n.
int reduce_scatter_latency_steps(int ranks) { return ranks > 1 ? ranks - 1 : 0; }
double reduce_scatter_bus_factor(int ranks) { return ranks > 1 ? static_cast<double>(ranks - 1) / ranks : 0.0; }

}  // namespace

const CollectiveAlgorithm& reduce_scatter_algorithm() {
  static const CollectiveAlgorithm algorithm{CollectiveKind::reduce_scatter, "reduce_scatter",
                                             &reduce_scatter_latency_steps, &reduce_scatter_bus_factor};
  return algorithm;
}

}  // namespace shardplan
