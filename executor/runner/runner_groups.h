// RunnerGroups: the sub-communicators a StepSchedule's collectives run on, created once from the world.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "communicator.h"
#include "unit_layout.h"

namespace shardplan::runner {

// One communicator per (GroupKind, size) the plan uses, split from the caller's world communicator in the same order on
// every rank (creation is collective). `world` is a private duplicate for GroupKind::world all-reduces, and `control`
// one for the runner's own barrier and loss/step-time reductions, so the data communicators' counters hold exactly
// the schedule's collectives (asserted per step by the tests).
class RunnerGroups {
 public:
  RunnerGroups(comm::Communicator& world, const std::vector<UnitLayout>& layouts);

  comm::Communicator& control() { return *control_; }
  comm::Communicator& world() { return *world_; }
  comm::Communicator& shard(int group_size);    // consecutive ranks (make_shard_group)
  comm::Communicator& replica(int group_size);  // ranks holding the same shard of a `group_size` shard group

  // The collectives issued on the data communicators (world, shard, replica) since they were created.
  comm::CommCounters data_counters() const;

 private:
  std::unique_ptr<comm::Communicator> control_;
  std::unique_ptr<comm::Communicator> world_;
  std::map<int, std::unique_ptr<comm::Communicator>> shard_;
  std::map<int, std::unique_ptr<comm::Communicator>> replica_;
};

}  // namespace shardplan::runner
