// PipelineP2p: the CPU runner's send and recv ops of a pipeline program (Note [Pipeline runner]) as MPI messages.
#pragma once

#include <map>
#include <span>
#include <vector>

#include "comm_counters.h"
#include "comm_handle.h"
#include "communicator.h"
#include "schedule.h"

namespace shardplan::runner {

// Note [Pipeline runner]: a pipeline-parallel plan runs as torchtitan lays it out (Note [ParallelDims]: pp is the
// outermost mesh dimension, so pipeline rank p is the ranks [p·s, (p+1)·s) of a stage's s data-parallel ranks). Each
// rank runs the program lower_pipeline gives its pipeline rank (Note [Pipeline programs] in
// planner/pipeline_schedule.h) over the layers of its stages only (pipeline_rank_model), with FSDP over its stage's
// data-parallel group; the ranks of one PP group (one per pipeline rank, the same data-parallel index) train on the
// same micro-batches. A `recv` op blocks the compute stream until the op's micro-batch's hidden state (forward, from
// the stage before) or its gradient (backward, from the stage after) has arrived; a `send` op posts the tensor the
// pass before it produced and completes on its own, as the schedule's p2p stream does. A message is matched by
// (micro-batch, sending stage, direction) in its tag, so the interleaved schedules' several stages per rank never
// mix up their messages, whatever order MPI delivers messages with different tags in. With tensor or context
// parallelism inside the stages (torchtitan's [pp, dp_shard, cp, tp] mesh) the PP group is the ranks of the same TP
// and CP coordinates, so each TP rank sends its sequence shard (Note [Sequence-parallel tokens]) and each CP rank its
// share of the sequences to its own counterpart on the next stage: the schedule's boundary bytes (Note [Pipeline
// programs]). A context-parallel ring's sends (is_ring_step) are the CP group's, not these.
class PipelineP2p {
 public:
  // `pipeline`: the PP group, its rank r being pipeline rank r; `stages`: pp × stages per rank. InputError when the
  // step's tags exceed what every backend accepts (comm::kMaxP2pTag).
  PipelineP2p(comm::Communicator& pipeline, int stages, int micro_batches);

  // Posts a send op's tensor (copied: the message owns its buffer until sent(op.id)).
  comm::CommHandle send(const Op& op, std::span<const float> values);
  // After the send's handle completed: frees its buffer.
  void sent(int op_id) { sending_.erase(op_id); }
  // Posts a recv op's receive into `into` (the caller waits on the handle before reading it).
  comm::CommHandle recv(const Op& op, std::span<float> into);

  const comm::Communicator& group() const { return *pipeline_; }

  // The messages one step of `program` posts on each rank: one per send op and per recv op between stages, of its
  // bytes (a context-parallel ring's steps are the CP group's, Runner::expected_step_p2p).
  static comm::P2pCounters expected(const StepSchedule& program);

 private:
  int tag(int sending_stage, int receiving_stage, int micro_batch) const;
  int peer(const Op& op) const { return op.peer_stage % pipeline_->size(); }

  comm::Communicator* pipeline_;
  int stages_;
  std::map<int, std::vector<float>> sending_;  // per send op in flight: its message
};

}  // namespace shardplan::runner
