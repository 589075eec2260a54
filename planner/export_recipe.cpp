// What each export does with a plan's fine-tuning recipe (--loss, the 8-bit optimizers): the check and the FSDP2
// script's recipe section.
#include <string>

#include "errors.h"
#include "plan_export.h"

namespace shardplan {

// Note [Exported recipes]: --loss (Note [Fine-tuning losses], costmodel/loss.h) and --optimizer adamw8bit /
// paged-adamw8bit (Note [8-bit optimizers], costmodel/precision.h) change what the plan predicts, so an export must
// run them or refuse:
// - fsdp2: the script carries them. LOSS and OPTIMIZER say what was planned; compute_loss(model, input_ids, labels)
//   runs the planned loss — torchtune's CEWithChunkedOutputLoss(num_output_chunks=8) over the model's logits split
//   along the tokens (tensor_split, as its docstring's example), the labels shifted as HF's ForCausalLMLoss does, or
//   Liger's fused linear cross-entropy, which apply_plan patches into the model's forward before fully_shard
//   (liger_kernel.transformers._apply_liger_kernel_to_instance with fused_linear_cross_entropy=True and every other
//   kernel swap off, so only the loss changes: model(input_ids=..., labels=...).loss); build_optimizer(params, lr)
//   builds bitsandbytes.optim.AdamW8bit or PagedAdamW8bit.
// - fsdp1, deepspeed, torchtitan: refused in one line naming the flag. fsdp1 and deepspeed are configurations of
//   someone else's training loop (the loss and optimizer are the user's code; ds_config.json's "optimizer" names
//   DeepSpeed's own), torchtitan has neither loss (its cross_entropy_loss) nor optimizer (Adam, AdamW).
void check_export_recipe(const std::string& format, const TrainingConfig& training) {
  if (format == "fsdp2") return;
  if (training.loss != LossKind::cross_entropy) {
    throw InputError("--export " + format + ": --loss " + to_string(training.loss) + " is carried by fsdp2 exports " +
                     "only (the loss runs in the training loop); expected --export fsdp2, or --loss cross-entropy");
  }
  if (is_8bit(training.optimizer)) {
    throw InputError("--export " + format + ": --optimizer " + to_string(training.optimizer) +
                     " (bitsandbytes) is carried by fsdp2 exports only; expected --export fsdp2, or --optimizer adamw");
  }
}

namespace export_detail {

namespace {

std::string python_loss(LossKind loss) {
  if (loss == LossKind::chunked_ce) {
    return R"PY(def compute_loss(model, input_ids, labels):
    # torchtune's CEWithChunkedOutputLoss (torchtune/modules/loss/ce_chunked_output_loss.py): the logits split into
    # 8 chunks along the tokens, each upcast to fp32 and cross-entropied on its own. Labels as the model's input ids:
    # shifted here so tokens < n predict n (HF's ForCausalLMLoss), the last position ignored.
    import torch
    from torchtune.modules.loss import CEWithChunkedOutputLoss

    loss_fn = CEWithChunkedOutputLoss(num_output_chunks=8)
    logits = model(input_ids=input_ids).logits
    shifted = torch.nn.functional.pad(labels[..., 1:], (0, 1), value=loss_fn.ignore_index)
    return loss_fn(list(logits.tensor_split(loss_fn.num_output_chunks, dim=1)), shifted)
)PY";
  }
  if (loss == LossKind::linear_ce) {
    return R"PY(def _apply_fused_linear_cross_entropy(model):
    # Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py) in the model's forward:
    # with labels, the final hidden states and lm_head.weight go to LigerFusedLinearCrossEntropy and the logits are
    # never materialised beyond one chunk of tokens. Every other Liger kernel stays off: only the loss changes.
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    _apply_liger_kernel_to_instance(model=model, rope=False, rms_norm=False, swiglu=False, geglu=False,
                                    layer_norm=False, cross_entropy=False, fused_linear_cross_entropy=True)


def compute_loss(model, input_ids, labels):
    # apply_plan patched the forward (_apply_fused_linear_cross_entropy); the model shifts the labels itself.
    return model(input_ids=input_ids, labels=labels).loss
)PY";
  }
  return "";
}

std::string python_optimizer(OptimizerKind optimizer) {
  if (!is_8bit(optimizer)) return "";
  const bool paged = optimizer == OptimizerKind::paged_adamw8bit;
  return std::string("def build_optimizer(params, lr):\n") +
         "    # bitsandbytes' " + (paged ? "PagedAdamW8bit" : "AdamW8bit") +
         ": m and v as uint8 codes, one fp32 absmax per block of 256 elements each" +
         (paged ? ",\n    # allocated in CUDA unified memory (paged to host only when the device runs out).\n"
                : ".\n") +
         "    import bitsandbytes as bnb\n\n" +
         "    return bnb.optim." + (paged ? "PagedAdamW8bit" : "AdamW8bit") + "(params, lr=lr)\n";
}

}  // namespace

std::string python_recipe_fsdp2(const TrainingConfig& training) {
  const std::string loss = python_loss(training.loss);
  const std::string optimizer = python_optimizer(training.optimizer);
  if (loss.empty() && optimizer.empty()) return "";
  std::string text = "# The fine-tuning recipe the plan's memory and step time assume (--loss, --optimizer).\n";
  text += "LOSS = " + python_string(to_string(training.loss)) + "\n";
  text += "OPTIMIZER = " + python_string(to_string(training.optimizer)) + "\n\n\n";
  text += loss;
  if (!loss.empty() && !optimizer.empty()) text += "\n\n";
  text += optimizer;
  return text + "\n\n";
}

}  // namespace export_detail
}  // namespace shardplan
