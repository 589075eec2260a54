// Collective cost: ring all-gather, reduce-scatter and all-reduce under the α-β model, one plug-in unit per collective.
#pragma once

#include <cstdint>
#include <string>

#include "hardware_profile.h"

namespace shardplan {

enum class CollectiveKind { all_gather, reduce_scatter, all_reduce, all_to_all };
const char* to_string(CollectiveKind kind);

// One collective's algorithm, as nccl-tests' testColl defines it (src/common.h, doc/PERFORMANCE.md): how many ring
// steps it takes, how much of the message each rank moves over its link, and the busbw factor that turns algorithm
// bandwidth into bus bandwidth. Implemented in all_gather.cpp, reduce_scatter.cpp, all_reduce.cpp, all_to_all.cpp.
struct CollectiveAlgorithm {
  CollectiveKind kind;
  const char* name;
  int (*latency_steps)(int ranks);         // α terms: ring steps
  double (*bus_factor)(int ranks);         // busbw = algbw × bus_factor; also the share of S crossing each link
};
const CollectiveAlgorithm& all_gather_algorithm();
const CollectiveAlgorithm& reduce_scatter_algorithm();
const CollectiveAlgorithm& all_reduce_algorithm();
const CollectiveAlgorithm& all_to_all_algorithm();
const CollectiveAlgorithm& collective_algorithm(CollectiveKind kind);

// Where a group's ranks sit: a group whose ranks span nodes is limited by the network (Note [Rails] in
// collective_cost.cpp), of which it gets the share its ranks per node are of the node's GPUs.
struct GroupPlacement {
  int ranks = 1;
  bool spans_nodes = false;
  int ranks_per_node = 0;  // 0: as many as fit, min(ranks, HardwareProfile::gpus_per_node)
};

struct CollectiveCost {
  double time_s = 0;
  double algbw_bytes_per_s = 0;  // S / t   (nccl-tests)
  double busbw_bytes_per_s = 0;  // algbw × bus_factor(n)
  std::string tier;              // the tier that bounds it
};

// `message_bytes` is S in nccl-tests' convention: the full gathered output for all-gather, the full input for
// reduce-scatter, the buffer for all-reduce, each rank's send buffer for all-to-all. time = latency +
// bus_factor(n)·(S + S½) / busbw, NCCL's ring model:
// latency = base + intra-node steps·α_intra + inter-node steps·α_inter (NCCL's src/graph/tuning.cc), busbw the tier's
// achievable bus bandwidth (Note [Rails]), S½ = comm_half_efficiency_bytes. A group of one rank costs nothing.
CollectiveCost collective_cost(CollectiveKind kind, std::int64_t message_bytes, const GroupPlacement& group,
                               const HardwareProfile& profile);

// nccl-tests' definitions, for printing measured tables: algbw = S / t, busbw = algbw × bus_factor(n).
double algorithm_bandwidth(std::int64_t message_bytes, double time_s);
double bus_bandwidth(CollectiveKind kind, std::int64_t message_bytes, double time_s, int ranks);

}  // namespace shardplan
