// The settings a plan with the optimizer in backward refuses (Note [Optimizer in backward]).
#include "optimizer_in_backward.h"

#include <algorithm>
#include <string>

#include "errors.h"

namespace shardplan {

void check_optimizer_in_backward(const Plan& plan) {
  if (!plan.training.optimizer_in_backward) return;
  const std::string flag = "--optimizer-in-backward";
  if (plan.grad_accumulation_steps > 1) {
    throw InputError(flag + " with " + std::to_string(plan.grad_accumulation_steps) +
                     " micro-batches per step: torchtune refuses gradient accumulation with optimizer_in_bwd (a hook "
                     "steps every micro-batch); expected one micro-batch per step (--global-batch = micro-batch x "
                     "data-parallel ranks), or no --optimizer-in-backward");
  }
  if (plan.pipeline.enabled()) {
    throw InputError(flag + " with --pipeline-parallel " + std::to_string(plan.pipeline.degree) +
                     ": torchtitan refuses optimizers in backward with pipeline parallelism; expected "
                     "--pipeline-parallel 1, or no --optimizer-in-backward");
  }
  if (plan.offload.params || plan.offload.optimizer) {
    throw InputError(flag + " with --cpu-offload: a host optimizer step per unit is not modelled; expected no CPU "
                            "offload, or no --optimizer-in-backward");
  }
  if (plan.tensor_parallel_degree != 1) {
    throw InputError(flag + " with --tensor-parallel " + std::to_string(plan.tensor_parallel_degree) +
                     ": modelled for FSDP alone; expected --tensor-parallel 1, or no --optimizer-in-backward");
  }
}

TrainingConfig one_micro_batch_per_step(TrainingConfig training, bool micro_batch_pinned, int data_parallel_ranks) {
  if (training.optimizer_in_backward && !micro_batch_pinned && training.global_batch > 0 && data_parallel_ranks > 0) {
    training.micro_batch = std::max<std::int64_t>(1, training.global_batch / data_parallel_ranks);
  }
  return training;
}

}  // namespace shardplan
