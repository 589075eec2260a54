// The FSDP2 export: fully_shard per unit, prefetch lists, checkpointing, and the plan's trainable set applied first.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "errors.h"
#include "plan_export.h"
#include "unit_layout.h"

namespace shardplan {

namespace {

using namespace export_detail;

// How one unit's strategy maps onto FSDP2, which has only meshes and reshard_after_forward: a 1-D mesh shards over
// every rank, a 2-D ("replicate", "shard") mesh is HSDP, and a shard dimension of 1 replicates (NO_SHARD).
struct Fsdp2Sharding {
  int replicate = 1;
  int shard = 1;
  bool may_reshard = true;  // false: the strategy keeps parameters gathered after forward (SHARD_GRAD_OP, ZeRO-2)
  std::string note;
  // Its slice of the one root mesh (Note [One root mesh]): every unit sharding over all data-parallel ranks uses
  // "dp_mesh", the one 2-D (replicate, shard) layout "hsdp_mesh".
  std::string mesh_name() const { return replicate == 1 ? "dp_mesh" : "hsdp_mesh"; }
};

Fsdp2Sharding fsdp2_sharding(const ShardingStrategy& strategy, int world_size, int gpus_per_node) {
  const ShardingLayout layout = resolve_sharding(strategy, world_size, gpus_per_node);
  Fsdp2Sharding sharding;
  switch (strategy.kind) {
    case StrategyKind::full_shard:
    case StrategyKind::zero3:
      sharding.shard = world_size;
      break;
    case StrategyKind::shard_grad_op:
      sharding.shard = world_size;
      sharding.may_reshard = false;
      break;
    case StrategyKind::zero2:
      sharding.shard = world_size;
      sharding.may_reshard = false;
      sharding.note = "zero2: FSDP2 cannot shard gradients without parameters; sharded as SHARD_GRAD_OP";
      break;
    case StrategyKind::no_shard:
    case StrategyKind::zero1:
      sharding.replicate = world_size;
      sharding.note = strategy.kind == StrategyKind::zero1
                          ? "zero1: FSDP2 cannot shard only optimizer states; replicated (shard the optimizer with "
                            "torch.distributed.optim.ZeroRedundancyOptimizer or use --export deepspeed)"
                          : "";
      break;
    case StrategyKind::hybrid_shard:
    case StrategyKind::hybrid_shard_zero2:
      sharding.replicate = layout.replicas;
      sharding.shard = layout.param_group;
      sharding.may_reshard = strategy.kind == StrategyKind::hybrid_shard;
      break;
  }
  return sharding;
}

// reshard_after_forward as the plan says, unless the strategy itself keeps parameters gathered after forward.
std::string reshard_value(const PlanUnit& unit, const Fsdp2Sharding& sharding, std::string& note) {
  if (!sharding.may_reshard) {
    if (unit.reshard_after_forward.enabled) {
      note = "the plan reshards after forward but " + strategy_label(unit.strategy) +
             " keeps parameters gathered until backward, so False";
    }
    return "False";
  }
  if (unit.reshard_after_forward.keeps_partial_copy()) return std::to_string(unit.reshard_after_forward.group_size);
  return unit.reshard_after_forward.enabled ? "True" : "False";
}

// The module that stands for unit `id` in prefetch lists: the model for the root, else the unit's first module (the
// modules of one fully_shard call share one FSDP state, so any of them names the group).
std::string unit_handle(const std::vector<std::vector<std::string>>& groups, int id) {
  if (id == 0) return "model";
  return python_module("model", groups[static_cast<std::size_t>(id)].front());
}

void write_prefetch(std::ostringstream& py, const Plan& plan, const std::vector<std::vector<std::string>>& groups) {
  py << "\n    # Prefetch exactly as planned: when a unit's forward (backward) starts, these units are all-gathered.\n"
     << "    # A unit of several modules is named by its first module; they share one FSDP state.\n";
  for (const bool forward : {true, false}) {
    for (std::size_t id = 0; id < plan.units.size(); ++id) {
      const auto& targets = forward ? plan.units[id].forward_prefetch : plan.units[id].backward_prefetch;
      if (targets.empty()) continue;
      py << "    " << unit_handle(groups, static_cast<int>(id))
         << (forward ? ".set_modules_to_forward_prefetch([" : ".set_modules_to_backward_prefetch([");
      for (std::size_t i = 0; i < targets.size(); ++i) py << (i ? ", " : "") << unit_handle(groups, targets[i]);
      py << "])\n";
    }
  }
}

// Note [One root mesh]: FSDP2 requires a TP-sharded parameter's DP mesh and TP mesh to have the same root ("FSDP
// requires the DP and TP mesh to have the same parent mesh", FSDPParam._init_sharded_param in
// torch/distributed/fsdp/_fully_shard/_fsdp_param.py), and meshes built by separate init_device_mesh calls do not.
// So the script builds ONE mesh, in torchtitan's ParallelDims order (torchtitan/distributed/parallel_dims.py:
// dp_replicate, dp_shard, then tp innermost, a dimension only where it is used), and slices it: mesh["tp"] for
// parallelize_module, mesh["dp_shard"] (or mesh["dp_replicate", "dp_shard"]) for fully_shard. A plan mixing a 2-D
// layout with units sharded over every data-parallel rank gets the latter as mesh["dp_replicate", "dp_shard"]
// flattened, as torchtitan flattens its "dp" mesh (DeviceMesh._flatten). Two different 2-D layouts (replicate x shard)
// are not slices of one mesh: such a plan is refused.
struct RootMesh {
  int replicate = 1;  // > 1: a "dp_replicate" dimension
  int shard = 1;
  int tp = 1;         // > 1: a "tp" dimension, innermost
  bool has_replicate() const { return replicate > 1; }
};

RootMesh root_mesh(const Plan& plan, const std::vector<Fsdp2Sharding>& shardings, int data_parallel, int tp) {
  RootMesh root{1, data_parallel, tp};
  for (std::size_t id = 0; id < shardings.size(); ++id) {
    const Fsdp2Sharding& sharding = shardings[id];
    if (sharding.replicate == 1) continue;
    if (root.has_replicate() && sharding.replicate != root.replicate) {
      throw InputError("--export fsdp2: unit " + std::to_string(id) + " ('" + plan.units[id].name + "') needs a " +
                       std::to_string(sharding.replicate) + " x " + std::to_string(sharding.shard) +
                       " (replicate x shard) mesh but another unit needs " + std::to_string(root.replicate) + " x " +
                       std::to_string(root.shard) +
                       ", and FSDP2's meshes must be slices of one root mesh (expected one hybrid group size per plan)");
    }
    root.replicate = sharding.replicate;
    root.shard = sharding.shard;
  }
  return root;
}

// The init_device_mesh call and each unit mesh's slice of it, as lines of apply_plan.
std::string python_root_mesh(const RootMesh& root, const std::vector<Fsdp2Sharding>& shardings) {
  std::vector<std::pair<std::string, int>> dims;
  if (root.has_replicate()) dims.emplace_back("dp_replicate", root.replicate);
  dims.emplace_back("dp_shard", root.shard);
  if (root.tp > 1) dims.emplace_back("tp", root.tp);
  std::string sizes, names;
  for (const auto& [name, size] : dims) {
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
    names += (names.empty() ? "" : ", ") + python_string(name);
  }
  if (dims.size() == 1) {
    sizes += ",";
    names += ",";
  }
  std::ostringstream py;
  py << "    # One root mesh, sliced for TP and for FSDP (Note [One root mesh] in shardplan: FSDP2 requires the DP and\n"
     << "    # TP meshes to share one parent), its dimensions in torchtitan's ParallelDims order.\n"
     << "    mesh = init_device_mesh(device_type, (" << sizes << "), mesh_dim_names=(" << names << "))\n";
  const bool flat = std::any_of(shardings.begin(), shardings.end(), [](const Fsdp2Sharding& s) { return s.replicate == 1; });
  const bool hybrid = root.has_replicate();
  if (flat) {
    py << "    dp_mesh = " << (hybrid ? "mesh[\"dp_replicate\", \"dp_shard\"]._flatten(\"dp\")" : "mesh[\"dp_shard\"]")
       << "\n";
  }
  if (hybrid) py << "    hsdp_mesh = mesh[\"dp_replicate\", \"dp_shard\"]\n";
  return py.str();
}

}  // namespace

ExportedFile export_fsdp2(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node) {
  validate_plan(plan, model, world_size, gpus_per_node);
  check_export_optimizer_step("fsdp2", plan.training);  // Note [Exported optimizer step]: cpu-adamw refused
  // Note [2-D plans] (tensor_parallel_view.h): FSDP shards over the data-parallel ranks of each TP index.
  check_export_support("fsdp2", plan, model);  // Note [Export constrains the search]
  const ParallelDims dims = parallel_dims(plan, world_size);  // Note [ParallelDims]
  const int tp = dims.tp();
  const int data_parallel = dims.data_parallel_world_size();
  const auto groups = unit_module_paths(plan, model);
  const auto units = plan_units(plan, model);
  const TorchPrecision precision = torch_precision(plan.training.precision);
  const PythonFinetune finetune = python_finetune(plan, model, false);
  const bool finetuning = !plan.training.finetune.trains_all();
  for (std::size_t id = 1; id < plan.units.size() && plan.training.loss == LossKind::linear_ce; ++id) {
    // Note [Exported recipes]: Liger's loss reads lm_head.weight from the model's forward, unsharded by the root's
    // hooks only; a head in a unit of its own stays sharded there (FSDP2 unshards it in lm_head.forward alone).
    for (std::size_t layer = plan.units[id].layers.begin; layer < plan.units[id].layers.end; ++layer) {
      if (model.layers[layer].kind != LayerKind::lm_head) continue;
      throw InputError("--export fsdp2: --loss linear-ce with the output head in unit " + std::to_string(id) +
                       " ('" + plan.units[id].name + "'), but Liger's loss reads lm_head.weight outside lm_head's "
                       "forward; expected the head in the root unit, or --loss chunked-ce");
    }
  }
  std::vector<std::vector<int>> forward, backward;
  std::vector<Fsdp2Sharding> shardings;
  for (const auto& unit : plan.units) {
    forward.push_back(unit.forward_prefetch);
    backward.push_back(unit.backward_prefetch);
    shardings.push_back(fsdp2_sharding(unit.strategy, data_parallel, dims.data_parallel_gpus_per_node(gpus_per_node)));
  }
  const RootMesh root = root_mesh(plan, shardings, data_parallel, tp);
  for (std::size_t id = 0; id < plan.units.size() && tp > 1; ++id) {
    // FSDPParam.to_sharded_post_forward: "Resharding to smaller mesh with TP is not supported yet"
    // (torch/distributed/fsdp/_fully_shard/_fsdp_param.py), so an integer reshard_after_forward fails with TP.
    if (plan.units[id].reshard_after_forward.keeps_partial_copy() && shardings[id].may_reshard) {
      throw InputError("--export fsdp2: unit " + std::to_string(id) + " ('" + plan.units[id].name +
                       "') keeps a copy sharded over " +
                       std::to_string(plan.units[id].reshard_after_forward.group_size) +
                       " ranks after forward, which FSDP2 cannot do with tensor parallelism (expected "
                       "reshard_after_forward true or false in a tensor_parallel_degree > 1 plan)");
    }
  }
  const bool float8_tensorwise = plan.training.precision.uses_fp8() && plan.training.precision.fp8 != Fp8Scaling::rowwise;

  std::ostringstream py;
  py << python_header("fsdp2", plan, model, world_size, gpus_per_node)
     << "# Requires torch >= 2.6 (fully_shard on a list of modules). Usage, after init_process_group and loading the\n"
     << (finetuning ? std::string("# model (e.g. transformers.AutoModelForCausalLM") +
                          (plan.training.finetune.mode == FinetuneMode::qlora
                               ? ", with quantization_config=quantization_config()"
                               : "") +
                          "): model = apply_plan(model); then build the\n# optimizer over the parameters that "
                          "require grad.\n"
                    : "# model (e.g. transformers.AutoModelForCausalLM): apply_plan(model); then build the optimizer.\n")
     << (plan.training.loss != LossKind::cross_entropy
             ? "# The planned loss: loss = compute_loss(model, input_ids, labels) (LOSS below).\n"
             : "")
     << (is_8bit(plan.training.optimizer)
             ? "# The planned optimizer: build_optimizer(params, lr) (OPTIMIZER below).\n"
             : "")
     << (plan.training.activation_offload
             ? "# The planned activation offloading: run the forward under activation_offload_context(model).\n"
             : "")
     << (plan.training.optimizer_in_backward
             ? "# The planned optimizer in backward: apply_optimizer_in_backward(model, make_optimizer) after "
               "apply_plan.\n"
             : "")
     << "# torch is imported inside apply_plan so the tables below can be read without torch installed.\n\n"
     << "# Module paths of each unit, one entry per plan unit in plan order: entry 0 is the root unit (every module\n"
     << "# no other unit covers), applied last as fully_shard(model) because fully_shard must see children first.\n"
     << "PLANNED_GROUPS = " << python_groups(groups) << "\n\n"
     << "# Unit ids (indices into PLANNED_GROUPS) all-gathered when each unit's forward / backward starts.\n"
     << "FORWARD_PREFETCH = " << python_id_lists(forward) << "\n"
     << "BACKWARD_PREFETCH = " << python_id_lists(backward) << "\n\n"
     << "FULL_CHECKPOINT_LAYERS = " << python_checkpointed_layers(plan, model, ActivationCheckpointing::full) << "\n"
     << "SELECTIVE_CHECKPOINT_LAYERS = "
     << python_checkpointed_layers(plan, model, ActivationCheckpointing::selective) << "\n"
     << "SELECTIVE_OP_CHECKPOINT_LAYERS = "
     << python_checkpointed_layers(plan, model, ActivationCheckpointing::selective_op) << "\n"
     << "PLANNED_MODEL = " << python_string(model.name) << "\n"
     << "PLANNED_WORLD_SIZE = " << world_size << "\n"
     << "TENSOR_PARALLEL_DEGREE = " << tp << "  # the innermost mesh dimension, inside a node\n"
     << "# Experts split over groups of this many ranks; always 1, as no export writes expert parallelism yet (Note\n"
     << "# [Export constrains the search]): the export checker refuses a script whose plan has more but no \"ep\" mesh.\n"
     << "EXPERT_PARALLEL_DEGREE = " << plan.training.expert_parallel_degree << "\n\n"
     << (tp > 1 ? python_tensor_parallel(model, float8_tensorwise) + "\n\n" : "")
     << finetune.tables << "\n\n"
     << python_module_helpers() << "\n\n" << finetune.functions << (finetuning ? "\n\n" : "")
     << python_recipe_fsdp2(plan.training)  // Note [Exported recipes]: "" for the default loss and optimizer
     << python_activation_offload_fsdp2(plan.training)  // Note [Exported activation offloading]: "" when off
     << python_optimizer_in_backward_fsdp2(plan.training)  // Note [Exported optimizer step]: "" when off
     << "def _apply_activation_checkpointing(model):\n"
     << "    # Before sharding, as torchtitan does: each wrapper takes its module's place, so fully_shard then shards\n"
     << "    # the wrapper under the same module path.\n"
     << "    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper\n\n"
     << "    for path in FULL_CHECKPOINT_LAYERS:\n"
     << "        _replace_module(model, path, checkpoint_wrapper(model.get_submodule(path)))\n"
     << "    for path in SELECTIVE_CHECKPOINT_LAYERS:\n"
     << "        _replace_module(model, path, checkpoint_wrapper(model.get_submodule(path),\n"
     << "                                                        context_fn=_selective_checkpoint_context))\n"
     << "    for path in SELECTIVE_OP_CHECKPOINT_LAYERS:\n"
     << "        _replace_module(model, path, checkpoint_wrapper(model.get_submodule(path),\n"
     << "                                                        context_fn=_selective_op_checkpoint_context))\n\n\n"
     << "def apply_plan(model, device_type=\"cuda\"):\n"
     << "    import torch\n"
     << "    from torch.distributed.device_mesh import init_device_mesh\n"
     << "    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard\n\n"
     << "    _check_model(model)\n"
     << "    world = torch.distributed.get_world_size()\n"
     << "    if world != PLANNED_WORLD_SIZE:\n"
     << "        raise ValueError(f\"shardplan: the plan is for {PLANNED_WORLD_SIZE} ranks, this run has {world}\")\n"
     << python_root_mesh(root, shardings);
  // Note [Exported recipes]: Liger's loss patched into the model's forward before anything wraps it.
  if (plan.training.loss == LossKind::linear_ce) py << "    _apply_fused_linear_cross_entropy(model)\n";
  if (!precision.note.empty()) py << "    # " << precision.note << "\n";
  if (finetuning) {
    // Note [Exported trainable set]: before sharding; the PeftModel (under LoRA) is what apply_plan returns.
    py << "    trained = _apply_finetune(model)\n"
       << "    _place_parameters(model)\n";
  } else if (!precision.cast_model_to.empty()) {
    py << "    model.to(" << precision.cast_model_to << ")\n";
  }
  if (plan.training.precision.uses_fp8()) {
    // Note [Float8 training] (costmodel/precision.h): torchtitan's Float8 converter, before TP and fully_shard.
    const bool rowwise = plan.training.precision.fp8 == Fp8Scaling::rowwise;
    py << "    # torchao float8 training (" << (rowwise ? "rowwise" : "tensorwise")
       << " scaling), the output head kept in bf16 as torchtitan's filter_fqns = [\"output\"] does.\n"
       << "    from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n"
       << "    float8_config = "
       << (rowwise ? "Float8LinearConfig.from_recipe_name(\"rowwise\")\n"
                   : "Float8LinearConfig(enable_fsdp_float8_all_gather=True)\n")
       << "    convert_to_float8_training(model, config=float8_config,\n"
       << "                               module_filter_fn=lambda module, fqn: fqn != \"lm_head\" and\n"
       << "                               module.in_features % 16 == 0 and module.out_features % 16 == 0)\n";
  }
  if (tp > 1) {
    if (plan.training.precision.uses_fp8() && !float8_tensorwise) {
      py << "    # float8 rowwise: torchtitan keeps the plain TP styles (its float8 styles are tensorwise only).\n";
    }
    py << "    # Tensor parallelism first (Note [Exported tensor parallelism]), on the root mesh's innermost dimension.\n"
       << "    _apply_tensor_parallel(model, mesh[\"tp\"])\n";
  }
  py << "    _apply_activation_checkpointing(model)\n\n";
  if (plan.training.torch_compile) {
    // Note [Compiled blocks] (costmodel/compiled_block.h): torchtitan's apply_compile, after AC and before sharding.
    std::string blocks;
    for (const LayerSpec& layer : model.layers) {
      if (layer.kind != LayerKind::transformer_block) continue;
      blocks += (blocks.empty() ? "" : ", ") + python_string(layer.name);
    }
    py << "    # torch.compile each transformer block (fullgraph, as torchtitan's apply_compile), after AC, before\n"
       << "    # fully_shard: AOTAutograd's partitioner chooses what each block keeps for backward.\n"
       << "    for path in [" << blocks << "]:\n"
       << "        _replace_module(model, path, torch.compile(model.get_submodule(path), fullgraph=True))\n\n";
  }

  std::vector<std::string> dtypes;
  if (!precision.param_dtype.empty()) dtypes.push_back("param_dtype=" + precision.param_dtype);
  if (!precision.reduce_dtype.empty()) dtypes.push_back("reduce_dtype=" + precision.reduce_dtype);
  py << "    mp_policy = MixedPrecisionPolicy(" << (dtypes.empty() ? "" : dtypes[0])
     << (dtypes.size() > 1 ? ", " + dtypes[1] : "") << ")\n";
  std::string offload_argument;
  if (plan.offload.params) {
    // FSDP2's CPU offload moves the sharded parameters and gradients to host and steps the optimizer there.
    py << "    offload_policy = CPUOffloadPolicy(pin_memory=True)\n";
    offload_argument = ", offload_policy=offload_policy";
  } else if (plan.offload.optimizer) {
    py << "    # The plan offloads only optimizer states; FSDP2 offloads parameters and optimizer together or nothing,\n"
       << "    # so nothing is offloaded here (use --export deepspeed for ZeRO-Offload of the optimizer alone).\n";
  }

  py << "\n    # Children before the root: fully_shard(model) takes only the parameters no earlier call claimed.\n";
  for (std::size_t order = 1; order <= plan.units.size(); ++order) {
    const std::size_t id = order % plan.units.size();  // units 1..n-1, then the root (unit 0)
    const auto& unit = plan.units[id];
    const auto& paths = groups[id];
    std::string note;
    const std::string reshard = reshard_value(unit, shardings[id], note);
    py << "    # unit " << id << " '" << comment_safe(unit.name) << "': " << paths.size() << " module(s), "
       << units[id].param_count << " parameters, " << strategy_label(unit.strategy) << "\n";
    if (finetuning) {
      const UnitParams params = unit_params(model, units[id].layers);
      py << "    #   trainable: " << params.trainable << " elements (LoRA adapters included), frozen: "
         << params.frozen << (params.packed_bytes > 0 ? ", 4-bit: " + std::to_string(params.packed_bytes) + " bytes" : "")
         << "\n";
    }
    if (!shardings[id].note.empty()) py << "    # " << shardings[id].note << "\n";
    if (!note.empty()) py << "    # " << note << "\n";
    py << "    fully_shard(";
    if (unit.is_root) {
      py << "model";
    } else if (paths.size() == 1) {
      py << python_module("model", paths.front());
    } else {
      std::vector<std::string> modules;
      for (const auto& path : paths) modules.push_back(python_module("model", path));
      py << python_list(modules, 4, 16);  // after "    fully_shard("
    }
    // A group's list is long already: its keyword arguments go on the next line.
    py << (paths.size() > 1 && !unit.is_root ? ",\n                " : ", ") << "mesh=" << shardings[id].mesh_name()
       << ", reshard_after_forward=" << reshard
       << ", mp_policy=mp_policy" << offload_argument << ")\n";
  }
  write_prefetch(py, plan, groups);
  if (plan.training.precision.fp8_all_gather) {
    py << "\n    # The float8 all-gather's scales: after each optimizer step call\n"
       << "    # torchao.float8.precompute_float8_dynamic_scale_for_fsdp(model) (one amax all-reduce for all weights).\n";
  }
  py << (finetuning ? "    return trained\n" : "    return model\n");
  return {"fsdp2_plan.py", py.str()};
}

}  // namespace shardplan
