// RunnerGroups: control / world duplicates and the shard and replica groups of every shard-group size in the plan.
#include "runner_groups.h"

#include <set>
#include <string>

#include "errors.h"
#include "hybrid_groups.h"

namespace shardplan::runner {

RunnerGroups::RunnerGroups(comm::Communicator& world, const std::vector<UnitLayout>& layouts) {
  control_ = world.split(0, world.rank());
  world_ = world.split(0, world.rank());
  std::set<int> sizes;  // ordered, so every rank creates the groups in the same order
  for (const auto& layout : layouts) {
    if (layout.param_group > 1) sizes.insert(layout.param_group);
  }
  for (int size : sizes) {
    shard_[size] = comm::make_shard_group(world, size);
    if (world.size() / size > 1) replica_[size] = comm::make_replica_group(world, size);
  }
}

comm::Communicator& RunnerGroups::shard(int group_size) {
  const auto found = shard_.find(group_size);
  if (found == shard_.end()) throw InternalError("no shard group of size " + std::to_string(group_size));
  return *found->second;
}

comm::Communicator& RunnerGroups::replica(int group_size) {
  const auto found = replica_.find(group_size);
  if (found == replica_.end()) throw InternalError("no replica group for shard groups of " + std::to_string(group_size));
  return *found->second;
}

comm::CommCounters RunnerGroups::data_counters() const {
  comm::CommCounters total = world_->counters();
  const auto add = [&total](const comm::CommCounters& counters) {
    for (std::size_t kind = 0; kind < comm::kCollectiveKinds; ++kind) {
      total.tallies[kind].calls += counters.tallies[kind].calls;
      total.tallies[kind].bytes += counters.tallies[kind].bytes;
    }
  };
  for (const auto& [size, group] : shard_) add(group->counters());
  for (const auto& [size, group] : replica_) add(group->counters());
  return total;
}

}  // namespace shardplan::runner
