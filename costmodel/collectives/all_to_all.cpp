// The all-to-all plug-in (MoE dispatch and combine under expert parallelism): its steps and nccl-tests busbw factor.
#include "collective_cost.h"

namespace shardplan {
namespace {

// ncclAllToAll is a group of n send/recv pairs (nccl-tests src/alltoall.cu: ncclSend/ncclRecv of S/n to each peer):
// every rank keeps 1/n of its S bytes and sends the other (n−1)/n · S over its links. nccl-tests doc/PERFORMANCE.md
// ("AllToAll"): busbw = algbw × (n−1)/n. NCCL schedules the peers in n−1 rounds (src/enqueue.cc, the p2p schedule
// steps through peers by distance), each paying a step's latency, as the ring collectives' steps do.
int all_to_all_latency_steps(int ranks) { return ranks > 1 ? ranks - 1 : 0; }
double all_to_all_bus_factor(int ranks) { return ranks > 1 ? static_cast<double>(ranks - 1) / ranks : 0.0; }

}  // namespace

const CollectiveAlgorithm& all_to_all_algorithm() {
  static const CollectiveAlgorithm algorithm{CollectiveKind::all_to_all, "all_to_all", &all_to_all_latency_steps,
                                             &all_to_all_bus_factor};
  return algorithm;
}

}  // namespace shardplan
