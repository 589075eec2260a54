// Hybrid-shard (HSDP) sub-groups, built with Communicator::split so they work for every backend.
#include "hybrid_groups.h"

#include <string>

#include "errors.h"

namespace shardplan::comm {

namespace {

void check_group_size(const Communicator& world, int group_size, const char* what) {
  if (group_size <= 0 || world.size() % group_size != 0) {
    const int rank = world.group().world_ranks.at(static_cast<std::size_t>(world.rank()));
    throw InternalError(std::string(what) + ": shard-group size " + std::to_string(group_size) +
                            " does not divide the world of " + std::to_string(world.size()) + " ranks",
                        std::source_location::current(), rank);
  }
}

}  // namespace

std::unique_ptr<Communicator> make_shard_group(Communicator& world, int group_size) {
  check_group_size(world, group_size, "make_shard_group");
  return world.split(world.rank() / group_size, world.rank());
}

std::unique_ptr<Communicator> make_replica_group(Communicator& world, int group_size) {
  check_group_size(world, group_size, "make_replica_group");
  return world.split(world.rank() % group_size, world.rank());
}

HybridGroups make_hybrid_groups(Communicator& world, int shard_group_size) {
  HybridGroups groups;
  groups.shard = make_shard_group(world, shard_group_size);
  groups.replica = make_replica_group(world, shard_group_size);
  return groups;
}

}  // namespace shardplan::comm
