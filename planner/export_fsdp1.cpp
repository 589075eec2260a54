// The FSDP1 export: an auto-wrap policy over exactly the planned units (regrouping multi-block units) and FSDP kwargs.
#include <map>
#include <sstream>

#include "errors.h"
#include "plan_export.h"

namespace shardplan {
namespace {

using namespace export_detail;

// Note [FSDP1 regrouping]: FSDP1 makes one flat parameter per wrapped module, and it can only wrap modules that exist
// and run their own forward. A unit of one module (a decoder layer, the head) is wrapped as it is. A unit of N
// consecutive entries of one ModuleList ("model.layers.4" .. "model.layers.7") has no module of its own, so the
// script first moves those entries into one container (_LayerGroup) that takes their place in the list, and wraps
// the container. Units of several modules that are not consecutive entries of one list cannot be expressed.
struct Regroup {
  std::string parent;       // "model.layers"
  std::vector<int> indices;  // consecutive child indices
};

// "model.layers.12" → {"model.layers", 12}; false when the last component is not an index.
bool split_indexed(const std::string& path, std::string& parent, int& index) {
  const auto dot = path.rfind('.');
  if (dot == std::string::npos || dot + 1 == path.size() || path.size() - dot > 9) return false;
  for (std::size_t i = dot + 1; i < path.size(); ++i) {
    if (path[i] < '0' || path[i] > '9') return false;
  }
  parent = path.substr(0, dot);
  index = std::stoi(path.substr(dot + 1));
  return true;
}

Regroup regroup_of(const PlanUnit& unit, const std::vector<std::string>& paths) {
  Regroup regroup;
  for (const auto& path : paths) {
    std::string parent;
    int index = 0;
    const bool indexed = split_indexed(path, parent, index);
    if (!indexed || (!regroup.indices.empty() && (parent != regroup.parent || index != regroup.indices.back() + 1))) {
      throw InputError("--export fsdp1: unit '" + unit.name + "' groups modules that are not consecutive entries of "
                       "one ModuleList ('" + path + "'); FSDP1 wraps one existing module per unit (see docs/exports.md"
                       "), use --export fsdp2, which shards any list of modules as one group");
    }
    regroup.parent = parent;
    regroup.indices.push_back(index);
  }
  return regroup;
}

// Where `path` lives after the regroups: entries of a regrouped list are renumbered (each group takes the place of
// its first entry), and an entry moved into a group becomes "<list>.<group>.layers.<position>". With `as_group`, the
// first entry of a group names the group itself (the module FSDP1 wraps for that unit).
std::string regrouped_path(const std::string& path, const std::vector<Regroup>& regroups, bool as_group) {
  for (const auto& target : regroups) {
    const std::string prefix = target.parent + ".";
    if (!path.starts_with(prefix)) continue;
    const std::string rest = path.substr(prefix.size());
    const auto dot = rest.find('.');
    std::string tail = dot == std::string::npos ? "" : rest.substr(dot);
    std::string parent;
    int index = 0;
    if (!split_indexed(prefix + rest.substr(0, dot), parent, index)) return path;
    int new_index = index;
    for (const auto& group : regroups) {
      if (group.parent != target.parent) continue;
      const int first = group.indices.front(), last = group.indices.back();
      if (index > last) {
        new_index -= last - first;  // the entries of this group after its first vanished from the list
      } else if (index >= first) {
        new_index -= index - first;
        if (!(as_group && index == first && tail.empty())) tail = ".layers." + std::to_string(index - first) + tail;
      }
    }
    return prefix + std::to_string(new_index) + tail;
  }
  return path;
}

const char* fsdp1_strategy(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::full_shard:
    case StrategyKind::zero3: return "FULL_SHARD";
    case StrategyKind::shard_grad_op:
    case StrategyKind::zero2: return "SHARD_GRAD_OP";
    case StrategyKind::no_shard:
    case StrategyKind::zero1: return "NO_SHARD";
    case StrategyKind::hybrid_shard: return "HYBRID_SHARD";
    case StrategyKind::hybrid_shard_zero2: return "_HYBRID_SHARD_ZERO2";
  }
  return "FULL_SHARD";
}

constexpr const char* kRegroupHelper = R"PY(def _regroup_layers(model):
    # See REGROUPS: each multi-layer unit's consecutive layers move into one container that FSDP1 can wrap. Parameter
    # names change with it (model.layers.4.mlp... becomes model.layers.1.layers.0.mlp...): load checkpoints before
    # apply_plan and save through FSDP's state-dict APIs.
    import torch.nn as nn

    class _LayerGroup(nn.Module):
        # Runs its layers in turn with the arguments the parent passes to one layer: hidden states are the first
        # argument and the output's first element (a tuple in transformers < 4.54) or the whole output.
        def __init__(self, layers):
            super().__init__()
            self.layers = nn.ModuleList(layers)
            kinds = {getattr(layer, "attention_type", None) for layer in layers}
            if len(kinds) == 1 and None not in kinds:
                self.attention_type = kinds.pop()  # read by the parent's loop in some model families

        def forward(self, hidden_states, *args, **kwargs):
            output = hidden_states
            for layer in self.layers:
                output = layer(hidden_states, *args, **kwargs)
                hidden_states = output[0] if isinstance(output, tuple) else output
            return output

    for parent_path, groups in REGROUPS.items():
        parent = model.get_submodule(parent_path)
        starts = {group[0]: group for group in groups}
        grouped = {index for group in groups for index in group}
        children = []
        for index, child in enumerate(parent):
            if index in starts:
                children.append(_LayerGroup([parent[i] for i in starts[index]]))
            elif index not in grouped:
                children.append(child)
        _replace_module(model, parent_path, nn.ModuleList(children))
)PY";

}  // namespace

ExportedFile export_fsdp1(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node) {
  validate_plan(plan, model, world_size, gpus_per_node);
  if (plan.training.precision.uses_fp8()) {
    // torchao's float8 training composes with FSDP2 (its fp8 all-gather hooks are FSDP2's fsdp_pre_all_gather).
    throw InputError("--export fsdp1: precision '" + plan.training.precision.name +
                     "' (torchao float8 training) is expressed by the FSDP2 export only (expected --export fsdp2)");
  }
  check_export_support("fsdp1", plan, model);  // Note [Export constrains the search]: no TP, no EP
  check_export_compile("fsdp1", plan.training);  // Note [Exported compile]
  check_export_recipe("fsdp1", plan.training);   // Note [Exported recipes]: refused
  check_export_activation_offload("fsdp1", plan.training);  // Note [Exported activation offloading]: refused
  check_export_optimizer_step("fsdp1", plan.training);      // Note [Exported optimizer step]: refused
  const bool compiled = plan.training.torch_compile;
  const ShardingStrategy strategy = uniform_strategy(plan, "fsdp1");
  const ShardingLayout layout = resolve_sharding(strategy, world_size, gpus_per_node);
  const auto groups = unit_module_paths(plan, model);
  const TorchPrecision precision = torch_precision(plan.training.precision);
  const FinetuneConfig& finetune_config = plan.training.finetune;
  const bool finetuning = !finetune_config.trains_all();
  if (finetune_config.mode == FinetuneMode::qlora && finetune_config.fsdp.version != 1) {
    // Note [QLoRA storage dtype] (costmodel/finetune.h): FSDP1's FlatParameter rule, checked as if planned for it.
    FinetuneConfig as_fsdp1 = finetune_config;
    as_fsdp1.fsdp.version = 1;
    try {
      validate_finetune(as_fsdp1, plan.training.precision, FinetuneFieldNames::cli());
    } catch (const InputError& error) {
      throw InputError(std::string("--export fsdp1: ") + error.what());
    }
  }
  const PythonFinetune finetune = python_finetune(plan, model, true);
  // use_orig_params (Note [Uniform requires_grad] in plan.h): False only where the plan was made for it (its units
  // then never mix frozen and trainable parameters); True everywhere else — the optimizer then sees the original
  // parameters by name, and units may mix frozen and trainable ones, as LoRA's blocks do.
  const bool use_orig_params = !finetune_config.fsdp.uniform_requires_grad();
  std::string orig_params_reason = "the optimizer sees the original parameters, with their names";
  std::string mixing_note;
  if (finetuning && use_orig_params) {
    bool mixes = false;
    for (const auto& unit : plan_units(plan, model)) mixes = mixes || mixes_requires_grad(model, unit.layers);
    if (mixes) {
      orig_params_reason = "units mix frozen and trainable parameters, which FSDP1 allows only with True";
      // Note [Frozen parameters in FSDP] (unit_layout.h): the FlatParameter's gradient covers its frozen part too.
      if (finetune_config.fsdp.version == 2) {
        mixing_note = "the plan was made for FSDP2 (--fsdp-version 2); under FSDP1 each unit that mixes frozen and "
                      "trainable parameters has a gradient over all of them, more memory than planned (plan with "
                      "--fsdp-version 1 to see it)";
      }
    }
  } else if (!use_orig_params) {
    orig_params_reason = "planned for FSDP1 without them: no unit mixes frozen and trainable parameters";
  }
  if (compiled) orig_params_reason += "; torch.compile traces FSDP1 modules only with True";

  std::vector<Regroup> regroups;
  std::vector<std::string> original_targets;  // each non-root unit's first module, before regrouping
  std::vector<std::string> notes;
  bool any_forward = false, any_backward = false, deep_prefetch = false;
  for (std::size_t id = 0; id < plan.units.size(); ++id) {
    const auto& unit = plan.units[id];
    any_forward = any_forward || !unit.forward_prefetch.empty();
    any_backward = any_backward || !unit.backward_prefetch.empty();
    deep_prefetch = deep_prefetch || unit.forward_prefetch.size() > 1 || unit.backward_prefetch.size() > 1;
    if (unit.is_root) continue;
    if (unit.reshard_after_forward.keeps_partial_copy() ||
        unit.reshard_after_forward.enabled != layout.reshard_after_forward) {
      notes.push_back("unit " + std::to_string(id) + " plans reshard_after_forward differently from " +
                      std::string(fsdp1_strategy(strategy.kind)) + ", which FSDP1 applies to every unit");
    }
    if (groups[id].size() > 1) regroups.push_back(regroup_of(unit, groups[id]));
    original_targets.push_back(groups[id].front());
  }
  if (deep_prefetch) notes.push_back("the plan prefetches more than one unit ahead; FSDP1 prefetches exactly one");
  if (plan.max_inflight_all_gathers > 2) {
    notes.push_back("max_inflight_all_gathers " + std::to_string(plan.max_inflight_all_gathers) +
                    ": FSDP1's limit_all_gathers allows two units in flight, not more");
  }
  if (strategy.kind == StrategyKind::zero1) notes.push_back("zero1: FSDP1 has no optimizer-only sharding; NO_SHARD");
  if (plan.offload.optimizer && !plan.offload.params) {
    notes.push_back("FSDP1 cannot offload optimizer states alone (CPUOffload moves parameters, gradients and the "
                    "optimizer step); use --export deepspeed");
  }
  if (!precision.note.empty()) notes.push_back(precision.note);
  if (!mixing_note.empty()) notes.push_back(mixing_note);

  std::map<std::string, std::vector<std::vector<int>>> regroup_table;
  for (const auto& regroup : regroups) regroup_table[regroup.parent].push_back(regroup.indices);
  std::vector<std::string> quoted_targets;
  for (const auto& path : original_targets) quoted_targets.push_back(python_string(regrouped_path(path, regroups, true)));

  std::vector<std::vector<int>> forward, backward;
  for (const auto& unit : plan.units) {
    forward.push_back(unit.forward_prefetch);
    backward.push_back(unit.backward_prefetch);
  }

  std::ostringstream py;
  py << python_header("fsdp1", plan, model, world_size, gpus_per_node)
     << "# Usage, after init_process_group and loading the model: model = apply_plan(model); then build the\n"
     << "# optimizer from the returned model. torch is imported inside functions so the tables read without it.\n";
  for (const auto& note : notes) py << "# Note: " << note << ".\n";
  py << "\n# Module paths of each unit, one entry per plan unit in plan order: entry 0 is the root unit (every module\n"
     << "# no other unit covers), which is FullyShardedDataParallel(model) itself.\n"
     << "PLANNED_GROUPS = " << python_groups(groups) << "\n\n"
     << "# FSDP1 wraps one existing module per unit, so each list of consecutive child indices becomes one container\n"
     << "# module in its parent ModuleList before wrapping (shardplan's docs/exports.md, FSDP1).\n"
     << "REGROUPS = {";
  bool first_entry = true;
  for (const auto& [parent, lists] : regroup_table) {
    std::vector<std::string> rendered;
    for (const auto& list : lists) {
      std::vector<std::string> ids;
      for (int index : list) ids.push_back(std::to_string(index));
      rendered.push_back(python_list(ids, 0, 0));
    }
    py << (first_entry ? "" : ", ") << python_string(parent) << ": " << python_list(rendered, 0, 28);
    first_entry = false;
  }
  py << "}\n"
     << "# The module each non-root unit becomes after REGROUPS (units 1, 2, ... in order); the auto-wrap policy\n"
     << "# wraps exactly these.\n"
     << "FSDP1_WRAP_TARGETS = " << python_list(quoted_targets, 0, 21) << "\n\n"
     << "# The plan's prefetch lists (unit ids), for reference: FSDP1 cannot take explicit lists; it prefetches the\n"
     << "# next unit in execution order when forward_prefetch / backward_prefetch are set.\n"
     << "FORWARD_PREFETCH = " << python_id_lists(forward) << "\n"
     << "BACKWARD_PREFETCH = " << python_id_lists(backward) << "\n\n"
     << "FULL_CHECKPOINT_LAYERS = " << python_checkpointed_layers(plan, model, ActivationCheckpointing::full) << "\n"
     << "SELECTIVE_CHECKPOINT_LAYERS = "
     << python_checkpointed_layers(plan, model, ActivationCheckpointing::selective) << "\n"
     << "SELECTIVE_OP_CHECKPOINT_LAYERS = "
     << python_checkpointed_layers(plan, model, ActivationCheckpointing::selective_op) << "\n"
     << (compiled ? "# torch.compile each transformer block (fullgraph), after wrapping and AC (_compile_blocks).\n"
                    "COMPILED_BLOCKS = " + python_transformer_blocks(model) + "\n"
                  : std::string())
     << "PLANNED_MODEL = " << python_string(model.name) << "\n"
     << "PLANNED_WORLD_SIZE = " << world_size << "\n\n"
     << finetune.tables << "\n\n"
     << python_module_helpers() << "\n\n" << kRegroupHelper << "\n\n"
     << (compiled ? python_compile_blocks_fsdp1() + "\n\n" : std::string()) << finetune.functions
     << (finetuning ? "\n\n" : "")
     << "def fsdp_kwargs(device_id=None):\n"
     << "    \"\"\"The FullyShardedDataParallel keyword arguments of the plan (FSDP1 gives every unit the same).\"\"\"\n"
     << "    import torch\n"
     << "    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy\n\n"
     << "    kwargs = dict(\n"
     << "        sharding_strategy=ShardingStrategy." << fsdp1_strategy(strategy.kind) << ",\n"
     << "        mixed_precision=";
  if (precision.param_dtype.empty()) {
    py << "None,\n";
  } else {
    py << "MixedPrecision(param_dtype=" << precision.param_dtype
       << (precision.reduce_dtype.empty() ? "" : ", reduce_dtype=" + precision.reduce_dtype) << "),\n";
  }
  py << "        backward_prefetch=" << (any_backward ? "BackwardPrefetch.BACKWARD_PRE" : "None") << ",\n"
     << "        forward_prefetch=" << (any_forward ? "True" : "False") << ",\n"
     << "        limit_all_gathers=" << (plan.max_inflight_all_gathers > 0 ? "True" : "False") << ",\n"
     << "        cpu_offload=CPUOffload(offload_params=" << (plan.offload.params ? "True" : "False") << "),\n"
     << "        use_orig_params=" << (use_orig_params ? "True" : "False") << ",  # " << orig_params_reason << "\n"
     << "        device_id=torch.cuda.current_device() if device_id is None else device_id,\n"
     << "    )\n";
  if (strategy.kind == StrategyKind::hybrid_shard || strategy.kind == StrategyKind::hybrid_shard_zero2) {
    py << "    from torch.distributed.device_mesh import init_device_mesh\n\n"
       << "    # HSDP: shard within groups of " << layout.param_group << ", replicate across " << layout.replicas
       << ".\n"
       << "    kwargs[\"device_mesh\"] = init_device_mesh(\"cuda\", (" << layout.replicas << ", " << layout.param_group
       << "), mesh_dim_names=(\"replicate\", \"shard\"))\n";
  }
  py << "    return kwargs\n\n\n"
     << "def apply_plan(model, device_id=None):\n"
     << "    import functools\n\n"
     << "    import torch\n"
     << "    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (\n"
     << "        CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)\n"
     << "    from torch.distributed.fsdp import FullyShardedDataParallel\n"
     << "    from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy\n\n"
     << "    _check_model(model)\n"
     << "    world = torch.distributed.get_world_size()\n"
     << "    if world != PLANNED_WORLD_SIZE:\n"
     << "        raise ValueError(f\"shardplan: the plan is for {PLANNED_WORLD_SIZE} ranks, this run has {world}\")\n";
  if (finetuning) {
    // Note [Exported trainable set]: before wrapping; the PeftModel (under LoRA) becomes the root.
    py << "    trained = _apply_finetune(model)\n"
       << "    _place_parameters(model)\n";
  } else if (!precision.cast_model_to.empty()) {
    py << "    model.to(" << precision.cast_model_to << ")\n";
  }
  py << "    # Modules to checkpoint, found by path before regrouping moves them.\n"
     << "    full = {model.get_submodule(path) for path in FULL_CHECKPOINT_LAYERS}\n"
     << "    selective = {model.get_submodule(path) for path in SELECTIVE_CHECKPOINT_LAYERS}\n"
     << "    selective_op = {model.get_submodule(path) for path in SELECTIVE_OP_CHECKPOINT_LAYERS}\n"
     << (compiled ? "    compiled = [model.get_submodule(path) for path in COMPILED_BLOCKS]\n" : "")
     << "    _regroup_layers(model)\n"
     << "    targets = {model.get_submodule(path) for path in FSDP1_WRAP_TARGETS}\n"
     << "    policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda module: module in targets)\n"
     << "    model = FullyShardedDataParallel(" << (finetuning ? "trained" : "model")
     << ", auto_wrap_policy=policy, **fsdp_kwargs(device_id))\n"
     << "    # After wrapping, as FSDP1 recipes do: the wrapper goes inside each unit's FSDP instance.\n"
     << "    if full:\n"
     << "        apply_activation_checkpointing(\n"
     << "            model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper,\n"
     << "                                                           checkpoint_impl=CheckpointImpl.NO_REENTRANT),\n"
     << "            check_fn=lambda module: module in full)\n"
     << "    if selective:\n"
     << "        apply_activation_checkpointing(\n"
     << "            model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper,\n"
     << "                                                           context_fn=_selective_checkpoint_context),\n"
     << "            check_fn=lambda module: module in selective)\n"
     << "    if selective_op:\n"
     << "        apply_activation_checkpointing(\n"
     << "            model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper,\n"
     << "                                                           context_fn=_selective_op_checkpoint_context),\n"
     << "            check_fn=lambda module: module in selective_op)\n";
  if (compiled) py << "    _compile_blocks(model, compiled)  # last: around the checkpoint wrappers, as torchtitan\n";
  py << "    return model\n";
  return {"fsdp1_plan.py", py.str()};
}

}  // namespace shardplan
