// What each export does with where the optimizer steps (Note [Exported optimizer step]): --optimizer-in-backward and
// --optimizer cpu-adamw, the checks and the FSDP2 script's optimizer-in-backward section.
#include <string>

#include "errors.h"
#include "plan_export.h"

namespace shardplan {

// Note [Exported optimizer step]: both flags change what the plan predicts (Note [Optimizer in backward] in
// optimizer_in_backward.h; Note [CPU optimizer step] in costmodel/host_optimizer.h), so an export must run them or
// refuse in one line naming the flag:
// - --optimizer-in-backward: fsdp2 carries OPTIMIZER_IN_BACKWARD and apply_optimizer_in_backward(model,
//   make_optimizer), one optimizer per trainable parameter stepped by its post-accumulate-grad hook, as torchtune's
//   training.register_optim_in_bwd_hooks does for optimizer_in_bwd: True (FSDP2 runs those hooks on the sharded
//   parameters after each reduce-scatter); torchtitan carries [optimizer] early_step_in_backward = true
//   (OptimizersInBackwardContainer). fsdp1 and deepspeed refuse: ds_config.json has no such setting, and fsdp1's
//   configuration leaves the optimizer to the user's loop, where it would step after backward.
// - --optimizer cpu-adamw: deepspeed carries it — "optimizer": {"type": "AdamW", "params": {"torch_adam": false,
//   "adam_w_mode": true}} beside zero_optimization.offload_optimizer {"device": "cpu"}, which DeepSpeed's engine
//   builds as deepspeed.ops.adam.DeepSpeedCPUAdam (engine._configure_basic_optimizer: not torch_adam and
//   zero_use_cpu_optimizer()), with zero_force_ds_cpu_optimizer true. fsdp2, fsdp1 and torchtitan refuse: FSDP's
//   CPU offload steps torch.optim.AdamW on the host (torchtitan: Adam or AdamW only).
void check_export_optimizer_step(const std::string& format, const TrainingConfig& training) {
  if (training.optimizer_in_backward && format != "fsdp2" && format != "torchtitan") {
    throw InputError("--export " + format + ": --optimizer-in-backward is carried by fsdp2 and torchtitan exports "
                     "only (" + format + " steps the optimizer after backward); expected --export fsdp2 or "
                     "torchtitan, or no --optimizer-in-backward");
  }
  if (training.optimizer == OptimizerKind::cpu_adamw && format != "deepspeed") {
    throw InputError("--export " + format + ": --optimizer cpu-adamw (DeepSpeed's CPU-Adam) is carried by "
                     "deepspeed exports only (" + format + " steps torch's AdamW on the host); expected --export "
                     "deepspeed, or --optimizer adamw");
  }
}

namespace export_detail {

std::string python_optimizer_in_backward_fsdp2(const TrainingConfig& training) {
  if (!training.optimizer_in_backward) return "";
  return R"PY(# The optimizer in backward the plan's memory and step time assume (--optimizer-in-backward; torchtune's
# optimizer_in_bwd: True).
OPTIMIZER_IN_BACKWARD = True


def apply_optimizer_in_backward(model, make_optimizer):
    # After apply_plan: one optimizer per trainable (sharded) parameter, built by make_optimizer([param]), stepped
    # by the parameter's post-accumulate-grad hook, which FSDP2 calls once its reduce-scatter has set the sharded
    # gradient; the gradient is dropped as soon as its parameter is updated (torchtune's
    # training.register_optim_in_bwd_hooks). The training loop then runs loss.backward() alone: no
    # optimizer.step() or zero_grad(), no gradient accumulation or clipping (torchtune refuses both with it).
    # Returns the optimizers by parameter, for their state_dict.
    optimizers = {param: make_optimizer([param]) for param in model.parameters() if param.requires_grad}

    def step(param):
        optimizers[param].step()
        optimizers[param].zero_grad()

    for param in optimizers:
        param.register_post_accumulate_grad_hook(step)
    return optimizers


)PY";
}

}  // namespace export_detail
}  // namespace shardplan
