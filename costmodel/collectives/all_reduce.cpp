// The ring all-reduce plug-in: its ring steps and its nccl-tests busbw factor.
#include "collective_cost.h"

namespace shardplan {
namespace {

// Ring all-reduce = reduce-scatter then all-gather: 2(n−1) steps, every link carries 2(n−1)/n · S.
// nccl-tests doc/PERFORMANCE.md ("AllReduce"): busbw = algbw × 2(n−1)/n.
int all_reduce_latency_steps(int ranks) { return ranks > 1 ? 2 * (ranks - 1) : 0; }
double all_reduce_bus_factor(int ranks) { return ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0; }

}  // namespace

const CollectiveAlgorithm& all_reduce_algorithm() {
  static const CollectiveAlgorithm algorithm{CollectiveKind::all_reduce, "all_reduce", &all_reduce_latency_steps,
                                             &all_reduce_bus_factor};
  return algorithm;
}

}  // namespace shardplan
