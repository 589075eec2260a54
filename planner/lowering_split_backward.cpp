// The Lowerer's split backward (Note [Split backward lowering]): a zero-bubble pipeline's input-gradient and
// weight-gradient parts of one layer's backward, with the memory torch.distributed.pipelining holds between them.
#include "lowerer.h"

namespace shardplan::lowering_internal {  // Note [Lowering] in lowering.h

// Note [Split backward lowering]: what torch.distributed.pipelining runs for the I and W actions of a zero-bubble
// schedule (torch/distributed/pipelining/_backward.py, stage_backward_input and stage_backward_weight; the kernels
// of each part: Note [Split backward] in pass_kernels.h):
//  - I: torch.autograd.grad from the stage's outputs to its inputs with retain_graph=True, after registering a hook
//    on each weight-gradient group's intermediate node (for a Linear its mm) that keeps the gradient flowing into it.
//    So the input part frees what a checkpoint recomputed (each recomputed tensor is dropped once unpacked,
//    torch/utils/checkpoint.py's unpack_hook) and its workspace, but keeps the layer's saved activations (the graph
//    is retained) and allocates the kept output gradients: per trainable weight its output, tokens × out_features,
//    and per LoRA adapter the same for lora_B and tokens × r for lora_A.
//  - W: one torch.autograd.grad per weight-gradient group, from its intermediates to its weights; the layer's saved
//    activations and the kept gradients go with it. Each call is its own autograd graph task, and non-reentrant
//    checkpointing recomputes a checkpointed block once per graph task that unpacks its tensors (unpack_hook keys
//    the recomputation on torch._C._current_graph_task_id()): under activation checkpointing the weight part
//    recomputes the layer once per group, each recompute's tensors freed after its call. That is the slowdown
//    torchtitan measured for InterleavedZeroBubble with AC (pytorch/torchtitan#773: "slower TPS when used with AC,
//    but without AC the TPS is fine"; pytorch/pytorch#136766).
// A group per trainable projection weight and per LoRA adapter matrix; norm weights, whose gradients the kernel
// spec folds into elementwise traffic, are not counted (so the recompute count is a lower bound under AC).
// FSDP writes a unit's gradients at its W, and synchronises at the stage's last W (backward_maybe_with_nosync with
// backward_type "weight", pytorch/pytorch#134052): the reductions come with the weight part.
namespace {

struct WeightGradGroups {
  std::int64_t output_grad_bytes = 0;  // the gradients the input part keeps for the weight part
  int groups = 0;                      // autograd.grad calls the weight part makes
};

WeightGradGroups weight_grad_groups(const ModelSpec& model, const TrainingConfig& training, std::size_t layer) {
  const LayerSpec& spec = model.layers[layer];
  WeightGradGroups result;
  if (spec.finetune && !spec.finetune->backward_needed) return result;
  const std::int64_t tokens = training.tokens_per_micro_batch(spec);
  const std::int64_t element_bytes = training.precision.param_compute_bytes;
  for (const ProjectionSpec& projection : effective_kernel_spec(model, spec).projections) {
    if (!projection.frozen_weight) {
      result.output_grad_bytes += tokens * projection.out_features * element_bytes;
      ++result.groups;
    }
    if (projection.lora_rank > 0) {
      result.output_grad_bytes += tokens * (projection.out_features + projection.lora_rank) * element_bytes;
      result.groups += 2;
    }
  }
  return result;
}

}  // namespace

std::int64_t Lowerer::kept_weight_gradient_bytes(std::size_t layer) const {
  return weight_grad_groups(model_, plan_.training, layer).output_grad_bytes;
}

int Lowerer::emit_backward_weight(std::size_t layer, int unit, int micro) {
  const LayerFacts& facts = layer_facts(layer);
  const WeightGradGroups groups = weight_grad_groups(model_, plan_.training, layer);
  for (int group = 0; group < groups.groups; ++group) emit_recompute(layer, unit, micro, -1, true);
  const int id = emit_compute(OpKind::backward_weight, layer, unit, micro, ComputePass::backward_weight);
  Op& op = schedule_.ops[static_cast<std::size_t>(id)];
  if (facts.kept_bytes + groups.output_grad_bytes > 0) {
    op.frees.push_back({MemoryCategory::activations, facts.kept_bytes + groups.output_grad_bytes});
  }
  return id;
}

}  // namespace shardplan::lowering_internal
