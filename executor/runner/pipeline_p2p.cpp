// PipelineP2p: tags, peers and buffers of a pipeline program's send and recv ops (Note [Pipeline runner]).
#include "pipeline_p2p.h"

#include <source_location>
#include <string>

#include "errors.h"

namespace shardplan::runner {

PipelineP2p::PipelineP2p(comm::Communicator& pipeline, int stages, int micro_batches)
    : pipeline_(&pipeline), stages_(stages) {
  // Tags run up to (micro_batches · stages) · 2 − 1 (tag() below).
  if (static_cast<long long>(micro_batches) * stages * 2 > comm::kMaxP2pTag + 1LL) {
    throw InputError("pipeline: " + std::to_string(micro_batches) + " micro-batches over " + std::to_string(stages) +
                         " stages need more message tags than MPI guarantees (32768); use fewer micro-batches",
                     std::source_location::current(), pipeline.group().world_ranks.at(
                                                          static_cast<std::size_t>(pipeline.rank())));
  }
}

// Forward messages go from stage s to s + 1, backward ones from s to s − 1: the sending stage and the direction
// name the pair of stages, the micro-batch the message among theirs.
int PipelineP2p::tag(int sending_stage, int receiving_stage, int micro_batch) const {
  const int backward = receiving_stage < sending_stage ? 1 : 0;
  return (micro_batch * stages_ + sending_stage) * 2 + backward;
}

comm::CommHandle PipelineP2p::send(const Op& op, std::span<const float> values) {
  SHARDPLAN_CHECK(op.kind == OpKind::send, "PipelineP2p::send of a non-send op");
  SHARDPLAN_CHECK(static_cast<std::int64_t>(values.size_bytes()) == op.bytes,
                  "send op " + std::to_string(op.id) + ": " + std::to_string(values.size_bytes()) +
                      " bytes to send, the schedule says " + std::to_string(op.bytes));
  std::vector<float>& buffer = sending_[op.id];
  buffer.assign(values.begin(), values.end());
  pipeline_->label_next("send of micro-batch " + std::to_string(op.micro_batch) + " to stage " +
                        std::to_string(op.peer_stage));
  return pipeline_->send(buffer.data(), buffer.size(), peer(op), tag(op.stage, op.peer_stage, op.micro_batch));
}

comm::CommHandle PipelineP2p::recv(const Op& op, std::span<float> into) {
  SHARDPLAN_CHECK(op.kind == OpKind::recv, "PipelineP2p::recv of a non-recv op");
  SHARDPLAN_CHECK(static_cast<std::int64_t>(into.size_bytes()) == op.bytes,
                  "recv op " + std::to_string(op.id) + ": room for " + std::to_string(into.size_bytes()) +
                      " bytes, the schedule says " + std::to_string(op.bytes));
  pipeline_->label_next("recv of micro-batch " + std::to_string(op.micro_batch) + " from stage " +
                        std::to_string(op.peer_stage));
  return pipeline_->recv(into.data(), into.size(), peer(op), tag(op.peer_stage, op.stage, op.micro_batch));
}

comm::P2pCounters PipelineP2p::expected(const StepSchedule& program) {
  comm::P2pCounters expected;
  for (const Op& op : program.ops) {
    if ((op.kind != OpKind::send && op.kind != OpKind::recv) || is_ring_step(op)) continue;
    comm::CollectiveTally& tally = op.kind == OpKind::send ? expected.sends : expected.recvs;
    tally.calls += 1;
    tally.bytes += static_cast<std::uint64_t>(op.bytes);
  }
  return expected;
}

}  // namespace shardplan::runner
