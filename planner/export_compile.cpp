// What each export does with a torch.compile'd plan (training.torch_compile): the check and the FSDP1 helper.
#include <string>

#include "errors.h"
#include "plan_export.h"

namespace shardplan {

// Note [Exported compile]: `--compile` (training.torch_compile) changes what the plan predicts — each transformer
// block keeps for backward what AOTAutograd's partitioner saves (Note [Compiled blocks], costmodel/compiled_block.h)
// — so an export that drops the compile hands the user a script whose memory is not the predicted one. Per format:
// - fsdp2: torchtitan's apply_compile, torch.compile(block, fullgraph=True) after AC and before fully_shard
//   (export_fsdp2.cpp): exactly what was modelled.
// - fsdp1: the same compiled region — each block, around its activation-checkpoint wrapper when it has one, with
//   FSDP's hooks outside it — compiled in place with nn.Module.compile() after wrapping and AC. PyTorch's guide
//   "Where to apply torch.compile?" (docs.pytorch.org/docs/stable/compile/programming_model.where_to_apply_compile)
//   says torch.compile does not handle FSDP wrapper modules well and to compile the inner modules, with .compile();
//   Dynamo traces FSDP1-managed modules only with use_orig_params=True (torch/_dynamo/variables/builder.py:
//   "Dynamo only supports FSDP with use_orig_params=True"; torch/distributed/fsdp/_dynamo_utils.py marks them), so
//   the script passes use_orig_params=True, and a plan made for use_orig_params=False is refused. Compiling after
//   AC keeps torchtitan's order: the partitioner sees the checkpoint, as under FSDP2 (Note [Compiled blocks]).
// - deepspeed: refused. A ds_config.json cannot request it: DeepSpeed compiles from the training script,
//   engine.compile(backend=..., compile_kwargs=...), which compiles the engine's whole module
//   (deepspeed/runtime/engine.py DeepSpeedEngine.compile; the config-driven wrapper went in microsoft/DeepSpeed#5581),
//   not the per-block region that was modelled, with ZeRO-3's parameter fetches inside it.
// `plan` makes this check before its search, so a refused export prints and writes nothing (Note [Output files]);
// the exporters make it again for callers of the library.
void check_export_compile(const std::string& format, const TrainingConfig& training) {
  if (!training.torch_compile) return;
  const std::string compiled = "the plan compiles each transformer block (training.torch_compile, from --compile)";
  if (format == "deepspeed") {
    throw InputError("--export deepspeed: " + compiled +
                     ", which ds_config.json cannot express (DeepSpeed compiles the whole engine from the training "
                     "script, engine.compile()); expected --export fsdp2 or fsdp1, or a plan without --compile");
  }
  if (format == "fsdp1" && training.finetune.fsdp.uniform_requires_grad()) {
    throw InputError("--export fsdp1: " + compiled +
                     " with use_orig_params false (--use-orig-params false), but torch.compile traces FSDP1 modules "
                     "only with use_orig_params=True; expected --use-orig-params true, or a plan without --compile");
  }
}

namespace export_detail {

std::string python_transformer_blocks(const ModelSpec& model) {
  std::vector<std::string> blocks;
  for (const LayerSpec& layer : model.layers) {
    if (layer.kind == LayerKind::transformer_block) blocks.push_back(python_string(layer.name));
  }
  return python_list(blocks, 0, 18);
}

std::string python_compile_blocks_fsdp1() {
  return R"PY(def _compile_blocks(model, blocks):
    # Note [Exported compile] in shardplan's planner/export_compile.cpp: each block is compiled in place (its
    # parameter names stay), around its activation-checkpoint wrapper when it has one, inside its FSDP unit.
    # nn.Module.compile needs torch >= 2.2; FSDP1 needs use_orig_params=True for it (fsdp_kwargs passes it).
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import ActivationWrapper

    wrappers = {module._checkpoint_wrapped_module: module for module in model.modules()
                if isinstance(module, ActivationWrapper)}
    for block in blocks:
        wrappers.get(block, block).compile(fullgraph=True)
)PY";
}

}  // namespace export_detail
}  // namespace shardplan
