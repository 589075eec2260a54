// Optimizer in backward (--optimizer-in-backward): what a plan that steps each unit's parameters as their gradients
// are ready may combine with, and what the lowering charges for it.
#pragma once

#include <cstdint>

#include "plan.h"

namespace shardplan {

// Note [Optimizer in backward]: torchtune's optimizer_in_bwd: True (recipes/full_finetune_single_device.py and
// full_finetune_distributed.py): one optimizer per parameter, stepped by a post-accumulate-grad hook
// (training.register_optim_in_bwd_hooks: `optim_dict[param].step(); optim_dict[param].zero_grad()`), so a gradient
// lives only until its parameter is updated and the full set of gradients is never held — "Fusing the optimizer step
// into the backward pass helps reduce the memory footprint associated with gradients" (the single-device recipe's
// docstring). Under FSDP2 the hook runs on the sharded parameter after its reduce-scatter, on the post-reduce stream
// (foreach_reduce in torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py calls the sharded parameter's
// _post_accumulate_grad_hooks once its new sharded gradient is set). torchtitan's optimizer.early_step_in_backward
// is the same (OptimizersInBackwardContainer, torchtitan/components/optimizer.py).
// What the lowering charges (lowering_reductions.cpp):
// - memory: no gradient shard in the step's persistent memory (persistent_memory). A unit's gradient exists from
//   its backward until its own step: as the reduction's buffers where the unit reduces (the reduce-scatter's output,
//   the full-size gradient, as without), and the shard the step reads (grad_shard_elements × grad_storage_bytes,
//   sharded_grads) from its first backward op to its step where backward writes the gradient in place (no copy).
// - time: one optimizer_step op per unit with gradients (its optimizer_shard_elements at HBM speed, as the fused
//   step's optimizer_bytes_per_element) right after the unit's reduction on the reduction's stream (FSDP2's
//   post-reduce stream), or, on one rank, after its last backward op on the compute stream (torchtune's single-device
//   hooks run in autograd, between the backward's kernels). The step's final optimizer op moves nothing: it only
//   joins the units' steps.
// Refused, one line naming the flag (check_optimizer_in_backward): more than one micro-batch per step (torchtune:
// "Gradient accumulation is not supported with optimizer in bwd"; a hook would step every micro-batch); pipeline
// parallelism (torchtitan: "Optimizers in backward is not supported with pipeline parallelism"); CPU offload (the
// host step per unit is not modelled); tensor parallelism above 1 (modelled for FSDP alone). Not modelled: gradient
// clipping, which torchtune also refuses with it (no clip_grad_norm is planned here).
void check_optimizer_in_backward(const Plan& plan);

// Before a search over `data_parallel_ranks` ranks with a fixed global batch: with the optimizer in backward and the
// micro-batch not pinned, `training` with all of a rank's sequences in one micro-batch (the baselines and the search's
// other plans then take no accumulation either); else `training` as it is. A pinned micro-batch that leaves several
// micro-batches per step is refused at lowering (check_optimizer_in_backward).
TrainingConfig one_micro_batch_per_step(TrainingConfig training, bool micro_batch_pinned, int data_parallel_ranks);

}  // namespace shardplan
