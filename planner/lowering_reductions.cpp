// The Lowerer's gradient reductions and optimizer step (Note [Lowering] in lowering.h): the reduce-scatter, HSDP's
// all-reduce across replicas, the offloaded gradient's copy to the host, the all-reduce of replicated gradients, the
// optimizer op, and float8's amax all-reduce after it.
#include "lowering.h"

#include <algorithm>
#include <vector>

#include "lowerer.h"
#include "unit_layout.h"

namespace shardplan {
namespace lowering_internal {  // Note [Lowering] in lowering.h

void Lowerer::reduce(int unit, int micro, std::vector<int>& reductions) {
  const auto& layout = layouts_[static_cast<std::size_t>(unit)];
  const auto& precision = plan_.training.precision;
  // Frozen parameters have no gradients to reduce (Note [Frozen parameters in FSDP] in unit_layout.h).
  if (layout.grad_elements == 0) return;
  const std::int64_t grad_copy = grads_allocated_[unit] ? layout.grad_copy_bytes : 0;
  grads_allocated_[unit] = false;
  if (layout.grad_group > 1) {
    Op scatter = make_op(OpKind::reduce_scatter, StreamKind::reduce_scatter, unit, micro);
    scatter.bytes = layout.reduce_scatter_elements() * precision.reduce_bytes;  // Note [Expert parallelism]
    scatter.element_bytes = precision.reduce_bytes;
    scatter.group = GroupKind::shard;
    scatter.group_size = layout.grad_group;
    scatter.group_spans_nodes = layout.grad_group > options_.gpus_per_node;
    scatter.group_ranks_per_node = std::min(layout.grad_group, options_.gpus_per_node);
    scatter.deps.push_back(last_backward_);
    const std::int64_t output_bytes = layout.grad_shard_elements * precision.reduce_bytes;
    scatter.allocates.push_back({MemoryCategory::comm_buffers, output_bytes});
    // Note [Reduction buffers]: HSDP's all-reduce or the offload copy frees the output, else the reduce-scatter does.
    const bool offload = plan_.offload.params;
    const bool output_passes_on = offload || layout.replicas > 1;
    std::vector<MemoryChange> scatter_holds{{MemoryCategory::unsharded_grads, grad_copy}};
    if (!output_passes_on) scatter_holds.push_back({MemoryCategory::comm_buffers, output_bytes});
    scatter.finishes_reduction = layout.replicas == 1;
    handover_.hand_over(StreamKind::reduce_scatter, scatter);
    int last = emit(std::move(scatter));
    last_reduce_scatter_ = last;  // Note [Reduce-scatter waits]
    handover_.hold(StreamKind::reduce_scatter, last, unit, std::move(scatter_holds));
    if (layout.replicas > 1) {
      // HSDP: the reduced shard is all-reduced across the replicas of the shard group, in place.
      Op across = make_op(OpKind::all_reduce, StreamKind::all_reduce, unit, micro);
      across.bytes = output_bytes;
      across.element_bytes = precision.reduce_bytes;
      across.finishes_reduction = true;
      across.group = GroupKind::replica;
      across.group_size = layout.replicas;
      across.group_spans_nodes = options_.world_size > options_.gpus_per_node;
      // A replica group takes one rank of every shard group: gpus_per_node / shard group of them share a node.
      across.group_ranks_per_node =
          std::min(layout.replicas, std::max(1, options_.gpus_per_node / std::max(1, layout.grad_group)));
      across.deps.push_back(last);
      handover_.hand_over(StreamKind::all_reduce, across);
      last = emit(std::move(across));
      if (!offload) handover_.hold(StreamKind::all_reduce, last, unit, {{MemoryCategory::comm_buffers, output_bytes}});
    }
    if (offload) {
      Op copy = make_op(OpKind::device_to_host, StreamKind::device_to_host, unit, micro);
      copy.bytes = output_bytes;
      copy.deps.push_back(last);
      copy.frees.push_back({MemoryCategory::comm_buffers, output_bytes});
      last = emit(std::move(copy));
    }
    reductions.push_back(last);
    last_reduction_[unit] = last;
    return;
  }
  // Replicated gradients (NO_SHARD, ZeRO-1): all-reduce over the world, in place (DDP-style).
  Op everywhere = make_op(OpKind::all_reduce, StreamKind::all_reduce, unit, micro);
  everywhere.bytes = layout.grad_elements * precision.reduce_bytes;
  everywhere.element_bytes = precision.reduce_bytes;
  everywhere.finishes_reduction = true;
  everywhere.group = GroupKind::world;
  everywhere.group_size = options_.world_size;
  everywhere.group_spans_nodes = options_.world_size > options_.gpus_per_node;
  everywhere.group_ranks_per_node = std::min(options_.world_size, options_.gpus_per_node);
  everywhere.deps.push_back(last_backward_);
  if (grad_copy > 0) everywhere.frees.push_back({MemoryCategory::unsharded_grads, grad_copy});
  if (options_.world_size > 1 || grad_copy > 0) {
    last_reduction_[unit] = emit(std::move(everywhere));
    reductions.push_back(last_reduction_[unit]);
  }
}

void Lowerer::step_in_backward(int unit, int micro, int reduction) {
  const auto& layout = layouts_[static_cast<std::size_t>(unit)];
  if (!plan_.training.optimizer_in_backward || layout.grad_elements == 0) return;
  Op step = unit_optimizer_step_op(layout.optimizer_shard_elements, plan_);
  step.unit = unit;
  step.micro_batch = micro;
  const MemoryChange grad{MemoryCategory::sharded_grads, in_backward_grad_bytes(layout, plan_)};
  // Where the gradient was copied (reduced, or cast to its storage dtype) the shard the step reads exists while it
  // runs; one written in place was allocated at the unit's first backward op (lowering.cpp).
  if (layout.grad_copies) step.allocates.push_back(grad);
  step.frees.push_back(grad);
  if (reduction >= 0 && options_.world_size > 1) {  // FSDP2's post-reduce stream: after the reduction, on its stream
    step.stream = schedule_.ops[static_cast<std::size_t>(reduction)].stream;
    step.deps.push_back(reduction);
  } else {  // one rank: torchtune's single-device hooks run in autograd, on the compute stream
    step.deps.push_back(last_backward_);
    if (reduction >= 0) step.deps.push_back(reduction);  // the one-rank gradient cast (all_reduce of one)
  }
  unit_steps_.push_back(emit(std::move(step)));
}

void Lowerer::optimizer_step(const std::vector<int>& reductions) {
  std::int64_t elements = 0;
  for (const auto& layout : layouts_) elements += layout.optimizer_shard_elements;
  Op step = optimizer_step_op(elements, plan_);
  // Note [Optimizer in backward]: every unit stepped in backward; the final step moves nothing and joins them.
  step.deps = plan_.training.optimizer_in_backward ? unit_steps_ : reductions;
  const int step_id = emit(std::move(step));
  // Note [Float8 training] (precision.h): with the float8 all-gather, torchao's precompute_float8_dynamic_scale_for_fsdp
  // runs after the optimizer step: one all-reduce (max) of every float8 weight's amax, an fp32 each, over the ranks
  // that shard them, before the next step's first gather.
  if (!plan_.training.precision.fp8_all_gather || options_.world_size == 1) return;
  std::int64_t weights = 0;
  for (const LayerSpec& layer : model_.layers) {
    if (layer.kind != LayerKind::transformer_block || !layer.kernels) continue;
    for (const ProjectionSpec& projection : layer.kernels->projections) weights += runs_in_fp8(layer, projection) ? 1 : 0;
  }
  if (weights == 0) return;
  Op amax = make_op(OpKind::all_reduce, StreamKind::all_reduce, -1, plan_.grad_accumulation_steps - 1);
  amax.bytes = weights * 4;
  amax.element_bytes = 4;
  amax.group = GroupKind::world;
  amax.group_size = options_.world_size;
  amax.group_spans_nodes = options_.world_size > options_.gpus_per_node;
  amax.group_ranks_per_node = std::min(options_.world_size, options_.gpus_per_node);
  amax.deps.push_back(step_id);
  emit(std::move(amax));
}

}  // namespace lowering_internal

Op optimizer_step_op(std::int64_t shard_elements, const Plan& plan) {
  // Note [Optimizer in backward]: the units were stepped in backward (unit_optimizer_step_op); nothing is left.
  if (plan.training.optimizer_in_backward) shard_elements = 0;
  return unit_optimizer_step_op(shard_elements, plan);
}

Op unit_optimizer_step_op(std::int64_t shard_elements, const Plan& plan) {
  Op step;
  step.kind = OpKind::optimizer_step;
  step.optimizer_elements = shard_elements;
  step.memory_bytes = static_cast<double>(shard_elements) *
                      optimizer_bytes_per_element(plan.training.precision, plan.training.optimizer);
  step.on_host = plan.offload.params || plan.offload.optimizer;
  return step;
}

}  // namespace shardplan
