// RunnerGroups: control / world duplicates and the shard and replica groups of every shard-group size in the plan.
#include "runner_groups.h"

#include <set>
#include <string>

#include "errors.h"
#include "hybrid_groups.h"

namespace shardplan::runner {

RunnerGroups::RunnerGroups(comm::Communicator& world, const std::vector<UnitLayout>& layouts,
                           const RankGroups& mesh) {
  control_ = world.split(0, world.rank());
  comm::Communicator* data_parallel = &world;
  if (mesh.tp.size() > 1 || mesh.pp.size() > 1) {  // Note [2-D mesh]: TP inner, DP outer; PP outermost
    // Each group's lowest rank names it (the split's color); ranks keep their order inside it, so a PP group's rank
    // is its pipeline rank (pp is the outermost mesh dimension, Note [ParallelDims]).
    if (mesh.tp.size() > 1) tensor_parallel_ = world.split(mesh.tp.front(), world.rank());
    if (mesh.pp.size() > 1) pipeline_ = world.split(mesh.pp.front(), world.rank());
    data_parallel_ = world.split(mesh.data_parallel.front(), world.rank());
    data_parallel = data_parallel_.get();
  }
  // A CP group is cp consecutive ranks of the DP group (Note [ParallelDims]), in CP rank order.
  if (mesh.cp.size() > 1) context_parallel_ = world.split(mesh.cp.front(), world.rank());
  world_ = data_parallel->split(0, data_parallel->rank());
  std::set<int> sizes;  // ordered, so every rank creates the groups in the same order
  for (const auto& layout : layouts) {
    if (layout.param_group > 1) sizes.insert(layout.param_group);
  }
  for (int size : sizes) {
    shard_[size] = comm::make_shard_group(*data_parallel, size);
    if (data_parallel->size() / size > 1) replica_[size] = comm::make_replica_group(*data_parallel, size);
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
  if (tensor_parallel_) add(tensor_parallel_->counters());
  return total;
}

comm::P2pCounters RunnerGroups::p2p_counters() const {
  comm::P2pCounters total;
  for (const auto* group : {pipeline_.get(), context_parallel_.get()}) {
    if (!group) continue;
    const comm::P2pCounters& counters = group->p2p_counters();
    total.sends = {total.sends.calls + counters.sends.calls, total.sends.bytes + counters.sends.bytes};
    total.recvs = {total.recvs.calls + counters.recvs.calls, total.recvs.bytes + counters.recvs.bytes};
  }
  return total;
}

}  // namespace shardplan::runner
