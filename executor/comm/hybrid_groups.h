// Hybrid-shard (HSDP) sub-groups: shard groups of consecutive ranks and replica groups of strided ranks.
#pragma once

#include <memory>

#include "communicator.h"

namespace shardplan::comm {

// A world of R·G ranks seen as R replicas of a G-rank shard group (PyTorch HSDP's 2-D device mesh, replicate × shard):
// shard group s = ranks [s·G, (s+1)·G), the ranks that split one model copy (reduce-scatter / all-gather run here);
// replica group j = ranks {j, j+G, j+2G, …}, the ranks that hold the same shard (the gradient all-reduce runs here).
// Consecutive ranks share a node under mpirun's default by-core mapping, so the shard group stays on the fast tier.
// Both helpers take G, the shard-group size, and are collective over `world`. G must divide world.size().
std::unique_ptr<Communicator> make_shard_group(Communicator& world, int group_size);
std::unique_ptr<Communicator> make_replica_group(Communicator& world, int group_size);

struct HybridGroups {
  std::unique_ptr<Communicator> shard;    // G ranks, consecutive
  std::unique_ptr<Communicator> replica;  // world.size() / G ranks, strided by G
};
HybridGroups make_hybrid_groups(Communicator& world, int shard_group_size);

}  // namespace shardplan::comm
