// RunnerGroups: the sub-communicators a StepSchedule's collectives run on, created once from the world.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "communicator.h"
#include "parallel_dims.h"
#include "unit_layout.h"

namespace shardplan::runner {

// One communicator per (GroupKind, size) the plan uses, split from the caller's world communicator in the same order on
// every rank (creation is collective). `world` is a private duplicate for GroupKind::world all-reduces, and `control`
// one for the runner's own barrier and loss/step-time reductions, so the data communicators' counters hold exactly
// the schedule's collectives (asserted per step by the tests). With tensor parallelism (Note [2-D mesh] in
// tensor_parallel_runner.h) or pipeline parallelism (Note [Pipeline runner] in pipeline_p2p.h) the schedule's groups
// live inside this rank's DP group — `world` is then the DP group — `tensor_parallel` is its TP group and `pipeline`
// its PP group (one rank per stage, ordered by pipeline rank); `control` spans every rank either way. With context
// parallelism (Note [Context-parallel runner] in context_parallel_runner.h) `context_parallel` is its CP group, whose
// ring steps are the point-to-point messages counted besides the pipeline's.
class RunnerGroups {
 public:
  // `mesh`: this rank's groups (ParallelDims::placement, Note [ParallelDims]); a TP group of one rank or none (the
  // default) means no tensor parallelism.
  RunnerGroups(comm::Communicator& world, const std::vector<UnitLayout>& layouts, const RankGroups& mesh = {});

  comm::Communicator& control() { return *control_; }
  comm::Communicator& world() { return *world_; }
  comm::Communicator* tensor_parallel() { return tensor_parallel_.get(); }  // null without tensor parallelism
  comm::Communicator* pipeline() { return pipeline_.get(); }                // null without pipeline parallelism
  comm::Communicator* context_parallel() { return context_parallel_.get(); }  // null without context parallelism
  comm::Communicator& shard(int group_size);    // consecutive ranks (make_shard_group)
  comm::Communicator& replica(int group_size);  // ranks holding the same shard of a `group_size` shard group

  // The collectives issued on the data communicators (world, shard, replica, tensor_parallel) since they were created.
  comm::CommCounters data_counters() const;
  // The point-to-point messages posted on the pipeline and CP groups since they were created (zero without them).
  comm::P2pCounters p2p_counters() const;

 private:
  std::unique_ptr<comm::Communicator> control_;
  std::unique_ptr<comm::Communicator> world_;
  std::unique_ptr<comm::Communicator> tensor_parallel_;
  std::unique_ptr<comm::Communicator> pipeline_;
  std::unique_ptr<comm::Communicator> context_parallel_;
  std::unique_ptr<comm::Communicator> data_parallel_;  // only split from
  std::map<int, std::unique_ptr<comm::Communicator>> shard_;
  std::map<int, std::unique_ptr<comm::Communicator>> replica_;
};

}  // namespace shardplan::runner
