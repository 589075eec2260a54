// The ring all-gather plug-in: its ring steps and its nccl-tests busbw factor.
#include "collective_cost.h"

namespace shardplan {
namespace {

// Ring all-gather: each rank forwards one 1/n chunk per step, n−1 steps, so every link carries (n−1)/n · S.
// nccl-tests doc/PERFORMANCE.md ("AllGather"): busbw = algbw × (n−1)/n.
int all_gather_latency_steps(int ranks) { return ranks > 1 ? ranks - 1 : 0; }
double all_gather_bus_factor(int ranks) { return ranks > 1 ? static_cast<double>(ranks - 1) / ranks : 0.0; }

}  // namespace

const CollectiveAlgorithm& all_gather_algorithm() {
  static const CollectiveAlgorithm algorithm{CollectiveKind::all_gather, "all_gather", &all_gather_latency_steps,
                                             &all_gather_bus_factor};
  return algorithm;
}

}  // namespace shardplan
