// Plan exports: a PyTorch FSDP2 script, an FSDP1 auto-wrap policy with FSDP kwargs, a DeepSpeed ZeRO ds_config.json
// (a torchtitan job config: export_torchtitan.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model_spec.h"
#include "plan.h"
#include "precision.h"
#include "sharding.h"

namespace shardplan {

// One generated file: its name inside the output directory and its full text. Exports build every file in memory
// first, so a plan that cannot be exported raises InputError before anything is written (no partial output files).
struct ExportedFile {
  std::string file_name;
  std::string contents;
};

// "fsdp2_plan.py": apply_plan(model) calls fully_shard on each unit's modules (children first, the root last), with
// the plan's reshard_after_forward, MixedPrecisionPolicy, CPUOffloadPolicy, explicit prefetch lists and activation
// checkpointing. Requires torch >= 2.6 (fully_shard on a list of modules). See docs/exports.md.
ExportedFile export_fsdp2(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node);

// "fsdp1_plan.py": an auto-wrap policy over exactly the planned unit boundaries (multi-block units are regrouped into
// containers first, since FSDP1 wraps one existing module per unit) and the FullyShardedDataParallel kwargs.
// InputError when a unit cannot be expressed as one module, or when units use different strategies.
ExportedFile export_fsdp1(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node);

// "ds_config.json": batch sizes, bf16/fp16, the ZeRO stage and bucket sizes derived from the units' sizes, offload.
// InputError when units map to different ZeRO stages or an offload DeepSpeed cannot do at that stage is planned.
ExportedFile export_deepspeed(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node);

// InputError unless `format` can carry a torch.compile'd plan (training.torch_compile; Note [Exported compile] in
// export_compile.cpp): fsdp2 and fsdp1 compile each block (fsdp1 with use_orig_params=True), deepspeed cannot.
// `plan` calls it before its search; the exporters call it too.
void check_export_compile(const std::string& format, const TrainingConfig& training);

// InputError, one line naming the flag, unless `format` can carry the plan's fine-tuning recipe (Note [Exported
// recipes] in export_recipe.cpp): --loss other than cross-entropy, --optimizer adamw8bit or paged-adamw8bit. fsdp2
// carries them; fsdp1, deepspeed and torchtitan refuse. `plan` calls it before its search; export_plan too.
void check_export_recipe(const std::string& format, const TrainingConfig& training);

// InputError, one line, when the plan offloads activations and `format` cannot carry it (Note [Exported activation
// offloading] in export_activation_offload.cpp): fsdp2 carries it; fsdp1, deepspeed and torchtitan refuse.
void check_export_activation_offload(const std::string& format, const TrainingConfig& training);

// InputError, one line naming the flag, when `format` cannot carry where the plan's optimizer steps (Note [Exported
// optimizer step] in export_optimizer_step.cpp): --optimizer-in-backward (fsdp2 and torchtitan carry it) and
// --optimizer cpu-adamw (deepspeed carries it).
void check_export_optimizer_step(const std::string& format, const TrainingConfig& training);

// What `format` can write (Note [Export constrains the search] in export_support.cpp): tensor parallelism > 1 and
// expert parallelism > 1, each with the reason when it cannot.
struct ExportSupport {
  bool tensor_parallel = false;
  bool expert_parallel = false;
  std::string tensor_parallel_why;
  std::string expert_parallel_why;
};
ExportSupport export_support(const std::string& format, const ModelSpec& model, const TrainingConfig& training);

// Before `plan`'s search: narrows the searched TP and EP degrees to those `format` can write; InputError, one line
// naming the flag, when the user pinned one it cannot (--tensor-parallel, tensor_parallel_pinned, with its degree
// first in tensor_parallel_degrees; --expert-parallel, training.expert_parallel_degree).
void restrict_search_to_export(const std::string& format, const ModelSpec& model, const TrainingConfig& training,
                               bool tensor_parallel_pinned, std::vector<int>& tensor_parallel_degrees,
                               std::vector<int>& expert_parallel_degrees);

struct KnobPins;  // search.h

// Before `plan`'s search: CPU offload kept to the strategies `format` offloads with (DeepSpeed offloads parameters at
// ZeRO stage 3 only: KnobPins::offload_at_zero3_only); InputError, one line, when --cpu-offload and --strategy pin a
// pair it cannot write.
void restrict_offload_to_export(const std::string& format, KnobPins& pins);

// InputError when `plan` uses a TP or EP degree `format` cannot write; every exporter calls it first.
void check_export_support(const std::string& format, const Plan& plan, const ModelSpec& model);

// The formats export_plan knows: {"fsdp2", "fsdp1", "deepspeed", "torchtitan"} (export_torchtitan.h).
std::vector<std::string> export_formats();

// Dispatches on `format`; InputError with the closest format names when it is unknown.
std::vector<ExportedFile> export_plan(const std::string& format, const Plan& plan, const ModelSpec& model,
                                      int world_size, int gpus_per_node);

// Helpers shared by the exporters, declared here so each renders the plan the same way and tests can check against
// them: the Python ones are defined in export_python.cpp (the trainable set's in export_finetune.cpp), the format-neutral ones (unit_module_paths, strategy_label,
// uniform_strategy) in export_deepspeed.cpp.
namespace export_detail {

// Module paths of every unit, in plan order (unit 0, the root, first): each unit's layers' names in model order.
std::vector<std::vector<std::string>> unit_module_paths(const Plan& plan, const ModelSpec& model);

// Names go into comments; a newline in a user's plan name must not end the comment and start code.
std::string comment_safe(const std::string& text);

// A Python string literal in double quotes, with backslashes, quotes and control characters escaped.
std::string python_string(const std::string& text);

// A Python expression for the module at `path` below `root`: "model.layers.3" → root.model.layers[3]; components
// that are neither identifiers nor integers fall back to root.get_submodule("...").
std::string python_module(const std::string& root, const std::string& path);

// "[a, b, ...]" from already rendered items, continued on new lines indented by `indent` + 4 past about 110 columns;
// `prefix` is how many characters precede the "[" on its line.
std::string python_list(const std::vector<std::string>& items, std::size_t indent, std::size_t prefix);
// [["a", "b"], ["c"]] and [[1], [2], []] as Python list literals, wrapped one entry per line.
std::string python_groups(const std::vector<std::vector<std::string>>& groups);
std::string python_id_lists(const std::vector<std::vector<int>>& lists);

// The names of the layers whose plan checkpointing is `mode`, as a Python list literal.
std::string python_checkpointed_layers(const Plan& plan, const ModelSpec& model, ActivationCheckpointing mode);

// The "# Generated by shardplan ..." comment block that starts every Python export.
std::string python_header(const std::string& format, const Plan& plan, const ModelSpec& model, int world_size,
                          int gpus_per_node);

// Python source of the helpers both scripts share: _check_model (every planned module path exists),
// _replace_module (swap a submodule in its parent) and _selective_checkpoint_context (recompute the attention core).
std::string python_module_helpers();

// The torch dtypes a precision recipe computes and reduces in ("torch.bfloat16"), empty for fp32 compute; whether
// the whole model is cast (pure-bf16: every copy in bf16) and what FSDP cannot express exactly.
struct TorchPrecision {
  std::string param_dtype;
  std::string reduce_dtype;
  std::string cast_model_to;  // non-empty: model.to(<dtype>) before sharding
  std::string note;           // a comment line for the generated file, empty when exact
};
TorchPrecision torch_precision(const PrecisionRecipe& recipe);

// The plan's trainable set in a script (Note [Exported trainable set] in export_finetune.cpp): module-level tables
// (FINETUNE_MODE, FREEZE_PATTERNS, LORA_CONFIG, LORA_MODULES, BNB_4BIT_CONFIG, FROZEN_DTYPE, TRAINABLE_DTYPE) and the
// functions quantization_config(), _apply_finetune(model) and _place_parameters(model). Both empty for full training.
struct PythonFinetune {
  std::string tables;
  std::string functions;
};
PythonFinetune python_finetune(const Plan& plan, const ModelSpec& model, bool fsdp1);

// The transformer blocks' module paths as a Python list literal after "COMPILED_BLOCKS = ", and the FSDP1 script's
// _compile_blocks(model, blocks), both defined in export_compile.cpp (Note [Exported compile]).
std::string python_transformer_blocks(const ModelSpec& model);
std::string python_compile_blocks_fsdp1();

// The FSDP2 script's recipe section (Note [Exported recipes]): LOSS and OPTIMIZER, make_loss() and
// build_optimizer(params, lr) as the plan's --loss and --optimizer name them.
std::string python_recipe_fsdp2(const TrainingConfig& training);
// The FSDP2 script's ACTIVATION_OFFLOAD and activation_offload_context(model) (Note [Exported activation
// offloading]); "" when the plan does not offload activations.
std::string python_activation_offload_fsdp2(const TrainingConfig& training);
// The FSDP2 script's OPTIMIZER_IN_BACKWARD and apply_optimizer_in_backward(model, make_optimizer) (Note [Exported
// optimizer step]); "" when the plan steps after backward.
std::string python_optimizer_in_backward_fsdp2(const TrainingConfig& training);

// The FSDP2 script's TP_BLOCKS table, _full_length_positions hook and _apply_tensor_parallel(model, tp_mesh)
// (Note [Exported tensor parallelism] in export_tensor_parallel.cpp); torchao's float8 styles for the blocks'
// projections under float8 tensorwise.
std::string python_tensor_parallel(const ModelSpec& model, bool float8_tensorwise);

// "full_shard", "hybrid_shard:8": the strategy as plan JSON spells it, for messages and comments.
std::string strategy_label(const ShardingStrategy& strategy);

// The one strategy every unit uses; InputError naming `format` and the first unit that differs.
ShardingStrategy uniform_strategy(const Plan& plan, const std::string& format);

}  // namespace export_detail
}  // namespace shardplan
