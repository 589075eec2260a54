// What each export does with --activation-offload (Note [Exported activation offloading]): the check and the FSDP2
// script's activation offloading section.
#include <string>

#include "errors.h"
#include "plan_export.h"

namespace shardplan {

// Note [Exported activation offloading]: the plan's memory and step time assume torchtune's OffloadActivations with
// the output head left out (Note [Activation offloading] in activation_offload.h), so an export must run that or
// refuse:
// - fsdp2: the script carries ACTIVATION_OFFLOAD and activation_offload_context(model), which builds
//   torchtune.training.OffloadActivations(use_pin_memory=True, use_streams=True) and disables it inside the output
//   head (model.get_output_embeddings()) with a NoOpManager entered and left by the head's forward hooks, as
//   torchtune's get_act_offloading_ctx_manager does for its models' `output`. The training loop runs the forward
//   under it. Not torch.autograd.graph.save_on_cpu(pin_memory=True): that copies on the compute stream (no side
//   stream to overlap with) and offloads the head's tensors too, so it is not what the plan was simulated with.
// - fsdp1, deepspeed, torchtitan: refused in one line. fsdp1 and deepspeed configure someone else's training loop,
//   where the forward runs; torchtitan's own activation offloading is not torchtune's.
void check_export_activation_offload(const std::string& format, const TrainingConfig& training) {
  if (format == "fsdp2" || !training.activation_offload) return;
  throw InputError("--export " + format + ": --activation-offload is carried by fsdp2 exports only (the forward runs " +
                   "in the training loop); expected --export fsdp2, or no --activation-offload");
}

namespace export_detail {

std::string python_activation_offload_fsdp2(const TrainingConfig& training) {
  if (!training.activation_offload) return "";
  return R"PY(# Activation offloading the plan's memory and step time assume (--activation-offload).
ACTIVATION_OFFLOAD = True


def activation_offload_context(model):
    # torchtune's OffloadActivations (torchtune/training/_activation_offloading.py): each saved tensor of 1024 bytes
    # or more is copied to pinned CPU memory on a side stream during forward and brought back in backward. Inside
    # the output head its hooks are off (a NoOpManager, as torchtune's get_act_offloading_ctx_manager does): the
    # head's saved tensors stay on the GPU. Build it once, after apply_plan; each step:
    #     with context: outputs = model(...)
    # and the loss's backward outside it.
    from torchtune.training import NoOpManager, OffloadActivations

    context = OffloadActivations(use_pin_memory=True, use_streams=True)
    head = model.get_output_embeddings()
    if head is not None:
        noop = NoOpManager()
        head.register_forward_pre_hook(lambda *args: noop.__enter__())
        head.register_forward_hook(lambda *args: noop.__exit__(), always_call=True)
    return context


)PY";
}

}  // namespace export_detail
}  // namespace shardplan
