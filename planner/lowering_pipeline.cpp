// The Lowerer's pipeline pass (Note [Pipeline programs] in pipeline_schedule.h): a pipeline rank's stage passes in
// the order of its schedule's actions, with the send and recv ops between stages.
#include <algorithm>
#include <string>

#include "errors.h"
#include "lowerer.h"

namespace shardplan::lowering_internal {  // Note [Lowering] in lowering.h

StepSchedule Lowerer::run_actions(const std::vector<PipelineAction>& actions, const std::vector<StageSpan>& stages,
                                  std::int64_t boundary_bytes, std::int64_t output_bytes) {
  begin_step();
  // Note [Pipeline buffers] (pipeline_schedule.h): the receive buffers of every micro-batch, made once and kept; a
  // non-first stage's first layer saves its input in one of them.
  const int micro_batches = plan_.grad_accumulation_steps;
  received_input_bytes_.assign(model_.layers.size(), 0);
  for (const StageSpan& stage : stages) {
    const int receives = (stage.first ? 0 : 1) + (stage.last ? 0 : 1);
    schedule_.persistent[static_cast<std::size_t>(MemoryCategory::comm_buffers)] +=
        static_cast<std::int64_t>(receives) * micro_batches * boundary_bytes;
    if (!stage.first) received_input_bytes_[stage.first_layer] = boundary_bytes;
  }
  // Nothing is gathered at the step's start; from then on the pass state carries over between the actions, so a
  // unit gathered by its first forward stays gathered (reshard_after_forward is off in a pipeline rank's plan).
  start_pass();
  std::vector<int> reductions;
  // Note [Pipeline buffers]: the outputs the last stage's schedule keeps for step() to return, and the head's
  // forward op (its unit, layer and stage name the release).
  std::int64_t returned_output_bytes = 0;
  int head_unit = -1, head_layer = -1, head_stage = -1;
  for (const PipelineAction& action : actions) {
    const auto stage = std::find_if(stages.begin(), stages.end(),
                                    [&](const StageSpan& span) { return span.stage == action.stage; });
    SHARDPLAN_CHECK(stage != stages.end(), "a pipeline action of a stage its rank does not hold");
    const int micro = action.micro_batch;
    current_stage_ = stage->stage;
    switch (action.kind) {
      case PipelineActionKind::forward: {
        if (!stage->first) emit_transfer(OpKind::recv, *stage, stage->stage - 1, micro, boundary_bytes);
        mark(micro, FragmentPass::step, -1);
        const std::size_t forward_begins = schedule_.ops.size();
        forward_layers(micro, stage->first_layer, stage->last_layer);
        if (!stage->last) {
          // Note [Pipeline buffers]: the stage's output stays in its forward cache until this micro-batch's backward.
          pass_op_of(forward_begins, OpKind::forward, stage->last_layer)
              .allocates.push_back({MemoryCategory::activations, boundary_bytes});
          emit_transfer(OpKind::send, *stage, stage->stage + 1, micro, boundary_bytes);
        } else if (output_bytes > 0) {
          // Note [Pipeline buffers]: the last stage's output (output_chunks) stays until the step returns it.
          Op& head = pass_op_of(forward_begins, OpKind::forward, stage->last_layer);
          head.allocates.push_back({MemoryCategory::activations, output_bytes});
          returned_output_bytes += output_bytes;
          head_unit = head.unit;
          head_layer = head.layer;
          head_stage = stage->stage;
        }
        break;
      }
      case PipelineActionKind::full_backward:
      case PipelineActionKind::backward_input: {
        // A split backward's input part (Note [Split backward lowering] in lowering_split_backward.cpp) sends the
        // input gradients as a full backward does and lets the stage's output go (stage_backward_input detaches it);
        // its saved activations stay, and it neither reshards nor reduces: the weight part does.
        const bool whole = action.kind == PipelineActionKind::full_backward;
        if (!stage->last) emit_transfer(OpKind::recv, *stage, stage->stage + 1, micro, boundary_bytes);
        // torch.distributed.pipelining's stage backward (_PipelineStageBase.backward_maybe_with_nosync): FSDP
        // reshards after backward and synchronises gradients on the last micro-batch's backward only
        // (set_reshard_after_backward / set_requires_gradient_sync(last_backward)).
        const bool last_backward = whole && micro + 1 == micro_batches;
        const std::size_t backward_begins = schedule_.ops.size();
        backward_layers(micro, last_backward, last_backward, stage->first_layer, stage->last_layer, reductions,
                        whole ? ComputePass::backward : ComputePass::backward_input);
        if (!stage->last) {
          // Freed by the backward of the layer that allocated it: activations are placed in their layer's size
          // class (Note [Allocator size classes]), and that backward runs first in the stage's backward.
          pass_op_of(backward_begins, whole ? OpKind::backward : OpKind::backward_input, stage->last_layer)
              .frees.push_back({MemoryCategory::activations, boundary_bytes});
        }
        if (!stage->first) emit_transfer(OpKind::send, *stage, stage->stage - 1, micro, boundary_bytes);
        break;
      }
      case PipelineActionKind::backward_weight: {
        // FSDP reshards and synchronises at the stage's last weight part (backward_maybe_with_nosync("weight")).
        const bool last_backward = micro + 1 == micro_batches;
        backward_layers(micro, last_backward, last_backward, stage->first_layer, stage->last_layer, reductions,
                        ComputePass::backward_weight);
        break;
      }
    }
  }
  if (returned_output_bytes > 0) {
    // Note [Pipeline buffers]: step() returns the kept outputs once every action has run (torchtitan drops them), a
    // zero-time wait on the last pass; the release is the head's op, as activations are freed in the size class of
    // the layer that allocated them (Note [Allocator size classes]).
    current_stage_ = head_stage;
    Op release = make_op(OpKind::wait, StreamKind::compute, head_unit, plan_.grad_accumulation_steps - 1);
    release.layer = head_layer;
    if (last_compute_ >= 0) release.deps.push_back(last_compute_);
    release.frees.push_back({MemoryCategory::activations, returned_output_bytes});
    emit(std::move(release));
  }
  current_stage_ = -1;
  optimizer_step(reductions);
  return std::move(schedule_);
}

Op& Lowerer::pass_op_of(std::size_t first_op, OpKind kind, std::size_t layer) {
  for (std::size_t id = first_op; id < schedule_.ops.size(); ++id) {
    Op& op = schedule_.ops[id];
    if (op.kind == kind && op.layer == static_cast<int>(layer)) return op;
  }
  throw InternalError(std::string("a pipeline stage's pass without the ") + to_string(kind) + " op of its layer " +
                      std::to_string(layer));
}

int Lowerer::emit_transfer(OpKind kind, const StageSpan& stage, int peer_stage, int micro, std::int64_t bytes) {
  Op op = make_op(kind, kind == OpKind::send ? StreamKind::p2p : StreamKind::compute, -1, micro);
  op.peer_stage = peer_stage;
  op.bytes = bytes;
  op.element_bytes = plan_.training.precision.param_compute_bytes;
  op.group_size = 2;
  op.group_spans_nodes = peer_stage < stage.stage ? stage.previous_crosses_nodes : stage.next_crosses_nodes;
  op.group_ranks_per_node = op.group_spans_nodes ? 1 : 2;
  // The send goes once the pass that produced its tensor has run (the p2p stream waits for the compute stream).
  if (kind == OpKind::send && last_compute_ >= 0) op.deps.push_back(last_compute_);
  return emit(std::move(op));
}

}  // namespace shardplan::lowering_internal
