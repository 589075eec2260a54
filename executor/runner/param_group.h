// ParamGroup: one unit's communication — unshard / wait / reshard / reduce_grads — around its FlatParam.
#pragma once

#include "comm_handle.h"
#include "communicator.h"
#include "flat_param.h"
#include "runner_groups.h"

namespace shardplan::runner {

// As FSDP2's FSDPParamGroup: the runner calls these when the schedule's ops say so and owns the handles they return
// (a handle is the op's completion; Note [Runner streams] in runner.h). Each call takes the communicator the op's
// GroupKind names, so the groups are exactly the schedule's.
class ParamGroup {
 public:
  ParamGroup(FlatParam& param, RunnerGroups& groups, int data_parallel_ranks)
      : param_(&param), groups_(&groups), data_parallel_ranks_(data_parallel_ranks) {}

  FlatParam& param() { return *param_; }

  // all_gather op: allocates the gathered buffer and gathers every rank's shard into it (not in place: the sharded
  // parameters stay a separate persistent buffer, as the memory model counts them).
  comm::CommHandle unshard();
  // free_unsharded op.
  void reshard() { param_->free_unsharded(); }

  // reduce_scatter op: the unit's full-size gradient summed over the shard group into a comm buffer holding this
  // rank's shard.
  comm::CommHandle reduce_scatter_grads();
  // all_reduce op across the replicas of the shard group (HSDP), in place on that comm buffer.
  comm::CommHandle all_reduce_replicas();
  // all_reduce op over the world (replicated gradients), in place on the gradient itself.
  comm::CommHandle all_reduce_world();

  // After the unit's last reduction of a micro-batch completed: the sum over all data-parallel ranks becomes their
  // mean (Note [Gradient mean]) and lands in the sharded gradient.
  void finish_reduction();
  // Free the full-size gradient a completed reduction read, and the comm buffer it reduced into, where the schedule
  // says (Note [Reduction buffers] in schedule.h).
  void release_gradient_input();
  void release_reduce_output();

 private:
  FlatParam* param_;
  RunnerGroups* groups_;
  int data_parallel_ranks_;
  TrackedBuffer reduce_output_;  // comm_buffers: this rank's reduced shard until it is accumulated
  bool world_reduced_ = false;
};

}  // namespace shardplan::runner
