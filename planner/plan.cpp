// Default plans (FSDP's usual wrapping) and plan validation against a model and a world.
#include "plan.h"

#include "context_parallel_lowering.h"
#include "errors.h"
#include "input_limits.h"
#include "optimizer_in_backward.h"
#include "stage_partition.h"

namespace shardplan {

Plan default_plan(const ModelSpec& model, const TrainingConfig& training, const ShardingStrategy& strategy,
                  const Wrapping& wrapping, int world_size) {
  Plan plan;
  plan.name = "default";
  plan.model = model.name;
  plan.training = training;
  plan.grad_accumulation_steps = static_cast<int>(training.grad_accumulation_steps(world_size));
  const auto units = resolve_units(model, wrapping);
  for (std::size_t id = 0; id < units.size(); ++id) {
    PlanUnit unit;
    unit.name = units[id].name;
    unit.is_root = units[id].is_root;
    if (!unit.is_root) unit.layers = wrapping.units[id - 1];
    unit.strategy = strategy;
    // See Note [Root unit] in wrapping.h: the root stays gathered from forward to backward.
    unit.reshard_after_forward.enabled = !unit.is_root && reshards_after_forward(strategy.kind);
    // One-ahead prefetch as FSDP does by default: forward gathers the next unit, backward the previous one.
    const int count = static_cast<int>(units.size());
    const int self = static_cast<int>(id);
    if (self + 1 < count) unit.forward_prefetch = {self + 1};
    // Backward runs the root's head first, then the last unit down to the first.
    if (unit.is_root && count > 1) unit.backward_prefetch = {count - 1};
    if (self >= 2) unit.backward_prefetch = {self - 1};
    plan.units.push_back(std::move(unit));
  }
  plan.layer_checkpointing.assign(model.layers.size(), ActivationCheckpointing::none);
  std::size_t block = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind == LayerKind::transformer_block) {
      plan.layer_checkpointing[layer] = block_checkpointing(training, block++);
    }
  }
  return plan;
}

Plan plan_with_units(const ModelSpec& model, const Plan& plan_template, const std::vector<LayerRange>& units,
                     const std::vector<bool>& kept_gathered) {
  SHARDPLAN_CHECK(kept_gathered.empty() || kept_gathered.size() == units.size(), "one kept flag per unit");
  Plan plan = plan_template;
  const PlanUnit unit_template = plan_template.units.at(plan_template.units.size() > 1 ? 1 : 0);
  const PlanUnit root_template = plan_template.units.at(0);
  plan.units.clear();
  const int count = static_cast<int>(units.size()) + 1;
  for (int id = 0; id < count; ++id) {
    PlanUnit unit = id == 0 ? root_template : unit_template;
    if (id > 0) {
      unit.layers = units[static_cast<std::size_t>(id - 1)];
      unit.name = model.layers[unit.layers.begin].name +
                  (unit.layers.end - unit.layers.begin > 1 ? "-" + model.layers[unit.layers.end - 1].name : "");
      if (!kept_gathered.empty() && kept_gathered[static_cast<std::size_t>(id - 1)]) {
        unit.reshard_after_forward.enabled = false;
      }
    }
    // FSDP's one-ahead prefetch (as default_plan sets it).
    unit.forward_prefetch.clear();
    unit.backward_prefetch.clear();
    if (id + 1 < count) unit.forward_prefetch = {id + 1};
    if (id == 0 && count > 1) unit.backward_prefetch = {count - 1};
    if (id >= 2) unit.backward_prefetch = {id - 1};
    plan.units.push_back(std::move(unit));
  }
  return plan;
}

std::vector<UnitInfo> plan_units(const Plan& plan, const ModelSpec& model) {
  Wrapping wrapping;
  for (const auto& unit : plan.units) {
    if (!unit.is_root) wrapping.units.push_back(unit.layers);
  }
  return resolve_units(model, wrapping);
}

bool mixes_requires_grad(const ModelSpec& model, const std::vector<std::size_t>& layers) {
  bool trains = false, frozen = false;
  for (const std::size_t layer : layers) {
    const auto& finetune = model.layers[layer].finetune;
    if (!finetune) {
      trains = trains || model.layers[layer].param_count() > 0;
      continue;
    }
    trains = trains || finetune->trainable_elements > 0;
    frozen = frozen || finetune->frozen_elements > 0 || finetune->quantized_elements > 0;
  }
  return trains && frozen;
}

namespace {

std::string uniform_requires_grad_rule() {
  return "--fsdp-version 1 --use-orig-params false needs every unit's parameters to share requires_grad "
         "(\"FlatParameter requires uniform requires_grad\", pytorch/pytorch#104690, #91167)";
}

}  // namespace

void check_uniform_requires_grad(const Plan& plan, const ModelSpec& model) {
  if (!plan.training.finetune.fsdp.uniform_requires_grad()) return;
  const auto units = plan_units(plan, model);
  for (std::size_t id = 0; id < units.size(); ++id) {
    if (!mixes_requires_grad(model, units[id].layers)) continue;
    throw InputError("plan: unit " + std::to_string(id) + " ('" + plan.units[id].name +
                     "') mixes frozen and trainable parameters, and " + uniform_requires_grad_rule() +
                     "; wrap them apart, or use --fsdp-version 2 or --use-orig-params true");
  }
}

std::string requires_grad_conflict(const ModelSpec& model) {
  std::vector<std::size_t> root;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind != LayerKind::transformer_block) {
      root.push_back(layer);
      continue;
    }
    if (!mixes_requires_grad(model, {layer})) continue;
    const bool lora = model.finetune.uses_lora();
    return "layer " + model.layers[layer].name + " mixes frozen and trainable parameters" +
           (lora ? " (LoRA's adapters beside its frozen weights, in every block LoRA targets)" : "") + ", and " +
           uniform_requires_grad_rule() + "; no wrapping of whole layers avoids it" +
           (lora ? " (answer.ai's fsdp_qlora wraps each adapter as its own unit)" : "") +
           ": use --fsdp-version 2 or --use-orig-params true";
  }
  if (mixes_requires_grad(model, root)) {
    return "the root unit (the layers outside the blocks: " + model.layers[root.front()].name + " ... " +
           model.layers[root.back()].name + ") mixes frozen and trainable parameters, and " +
           uniform_requires_grad_rule() + ": freeze all of them or none, or use --fsdp-version 2 or --use-orig-params true";
  }
  return "";
}

void validate_plan(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node) {
  // The layers must have been resolved for the plan's fine-tuning (finetuned_model); a caller's bug, not the user's.
  SHARDPLAN_CHECK(model.finetune == plan.training.finetune,
                  "the model was not resolved for the plan's fine-tuning (finetuned_model, mode " +
                      std::string(to_string(plan.training.finetune.mode)) + ", model's " +
                      to_string(model.finetune.mode) + ")");
  if (plan.units.empty() || !plan.units.front().is_root) {
    throw InputError("plan: unit 0 must be the root unit (\"root\": true)");
  }
  for (std::size_t id = 1; id < plan.units.size(); ++id) {
    if (plan.units[id].is_root) throw InputError("plan: unit " + std::to_string(id) + ": only unit 0 may be the root");
  }
  plan_units(plan, model);  // ranges in bounds, ordered, non-overlapping, tied layers together
  validate_tensor_parallel_degree(plan.tensor_parallel_degree, model, world_size, gpus_per_node,
                                  "plan: tensor_parallel_degree");
  if (plan.tensor_parallel_degree > 1 && (plan.offload.params || plan.offload.optimizer)) {
    throw InputError("plan: tensor_parallel_degree " + std::to_string(plan.tensor_parallel_degree) +
                     " with CPU offload: not yet supported (expected tensor_parallel_degree 1 or no offload)");
  }
  if (plan.tensor_parallel_degree > 1 && plan.training.torch_compile) {
    // Note [Compiled blocks]: the compiled block's savings are derived for the unsharded block only.
    throw InputError("plan: torch_compile with tensor_parallel_degree " + std::to_string(plan.tensor_parallel_degree) +
                     ": not yet modelled (expected tensor_parallel_degree 1 or torch_compile false)");
  }
  check_optimizer_in_backward(plan);  // Note [Optimizer in backward]
  validate_expert_parallel(plan.training, model);
  if (world_size % plan.training.expert_parallel_degree != 0) {
    throw InputError("plan: expert_parallel_degree " + std::to_string(plan.training.expert_parallel_degree) +
                     ": expected a divisor of the " + std::to_string(world_size) + " ranks");
  }
  // Note [Context-parallel lowering] (context_parallel_lowering.h).
  validate_context_parallel(plan.context_parallel.degree, plan.training, model, "plan: context_parallel_degree");
  // The checks above name the plan's JSON fields; this one validates the degrees together (Note [ParallelDims]).
  const ParallelDims dims = parallel_dims(plan, world_size);
  const int count = static_cast<int>(plan.units.size());
  for (int id = 0; id < count; ++id) {
    const auto& unit = plan.units[static_cast<std::size_t>(id)];
    const std::string label = "plan: unit " + std::to_string(id) + " ('" + unit.name + "')";
    for (const auto* list : {&unit.forward_prefetch, &unit.backward_prefetch}) {
      for (int target : *list) {
        if (target < 0 || target >= count || target == id) {
          throw InputError(label + ": prefetch names unit " + std::to_string(target) + ", expected another unit id in 0.." +
                           std::to_string(count - 1));
        }
      }
    }
    try {
      // Note [Tensor parallel degree]: FSDP shards over the data-parallel ranks, gpus_per_node / tp of them per node.
      const ShardingLayout layout = resolve_sharding(unit.strategy, dims.data_parallel_world_size(),
                                                     dims.data_parallel_gpus_per_node(gpus_per_node));
      const int partial = unit.reshard_after_forward.group_size;
      if (unit.reshard_after_forward.keeps_partial_copy() &&
          (partial >= layout.param_group || layout.param_group % partial != 0)) {
        throw InputError("reshard_after_forward " + std::to_string(partial) + ": expected a divisor of the shard group " +
                         std::to_string(layout.param_group) + " smaller than it");
      }
    } catch (const InputError& error) {
      throw InputError(label + ": " + error.what());
    }
  }
  if (plan.layer_checkpointing.size() != model.layers.size()) {
    throw InputError("plan: activation checkpointing lists " + std::to_string(plan.layer_checkpointing.size()) +
                     " layers, the model has " + std::to_string(model.layers.size()));
  }
  if (plan.grad_accumulation_steps < 1) throw InputError("plan: grad_accumulation_steps: expected at least 1");
  if (plan.max_inflight_all_gathers < 0) throw InputError("plan: max_inflight_all_gathers: expected >= 0");
  validate_training(plan.training, model);
  check_uniform_requires_grad(plan, model);
  validate_step_size(plan, model);
}

PipelinePolicy default_pipeline(const ModelSpec& model, int degree, PipelineScheduleKind schedule,
                                int stages_per_rank) {
  PipelinePolicy pipeline;
  pipeline.degree = degree;
  pipeline.schedule = schedule;
  pipeline.stages_per_rank = stages_per_rank;
  int blocks = 0;
  for (const LayerSpec& layer : model.layers) blocks += layer.kind == LayerKind::transformer_block ? 1 : 0;
  // torchtitan's pipeline_parallel_first_stage_less_layers / _last_stage_less_layers default, 1 each.
  const std::vector<int> split = torchtitan_stage_blocks(degree * stages_per_rank, blocks, 1, 1, "--pipeline-parallel");
  pipeline.stages = stage_layer_ranges(model, split, "--pipeline-parallel");
  return pipeline;
}

ParallelDims parallel_dims(const Plan& plan, int world_size) {
  ParallelDegrees degrees;
  degrees.tp = plan.tensor_parallel_degree;
  degrees.pp = plan.pipeline.degree;
  degrees.cp = plan.context_parallel.degree;
  degrees.ep = plan.training.expert_parallel_degree;
  return ParallelDims(degrees, world_size, "plan");
}

void validate_tensor_parallel_degree(int degree, const ModelSpec& model, int world_size, int gpus_per_node,
                                     const std::string& where) {
  const std::string value = where + " " + std::to_string(degree) + ": expected ";
  if (degree < 1 || (degree & (degree - 1)) != 0) throw InputError(value + "a power of two (1, 2, 4, 8)");
  if (degree == 1) return;
  if (gpus_per_node % degree != 0 || world_size % degree != 0) {
    throw InputError(value + "a divisor of the " + std::to_string(gpus_per_node) +
                     " GPUs per node and of the world of " + std::to_string(world_size) +
                     " (tensor parallelism stays inside a node)");
  }
  if (!model.finetune.trains_all()) {
    throw InputError(value + "1 when fine-tuning (tensor parallelism with frozen or LoRA layers is not yet supported)");
  }
  if (!model.architecture) {
    throw InputError(value + "1 for a model without a decoder architecture (a layer list, a vision encoder or a "
                     "LLaVA model; tensor parallelism splits the heads and the FFN of a known decoder: use a preset "
                     "or a decoder's Hugging Face config.json)");
  }
  const DecoderArchitecture& arch = *model.architecture;
  // tensor_parallel_shard (costmodel/tensor_parallel.h) splits projections by their HF names; experts and fused
  // projections have none it knows, so it would replicate them silently.
  if (arch.family == DecoderArchitecture::Family::gpt_neox) {
    throw InputError(value + "1 for GPT-NeoX (not yet supported: tensor_parallel_shard knows no query_key_value, "
                     "dense_h_to_4h names)");
  }
  if (arch.mla) {
    throw InputError(value + "1 for multi-head latent attention (DeepSeek-V2/V3; not yet supported: "
                     "tensor_parallel_shard knows no MLA projection names)");
  }
  if (arch.moe) {
    throw InputError(value + "1 for a mixture-of-experts model (not yet supported: its experts split by expert "
                     "parallelism, --expert-parallel)");
  }
  if (arch.fused_projections) {
    throw InputError(value + "1 for fused qkv_proj/gate_up_proj projections (Phi-3; not yet supported)");
  }
  if (arch.fused_qkv || arch.naming != DecoderArchitecture::Naming::llama || !arch.gated_mlp) {
    throw InputError(value + "1 for " + (arch.fused_qkv ? "fused q/k/v projections" : "a two-matrix MLP") +
                     " (Falcon, InternLM2, StarCoder2; not yet supported: tensor_parallel_shard knows no "
                     "query_key_value, wqkv or c_fc names)");
  }
  const std::pair<const char*, std::int64_t> widths[] = {
      {"attention heads", arch.num_heads}, {"key/value heads", arch.num_kv_heads}, {"FFN width", arch.intermediate_size}};
  for (const auto& [name, width] : widths) {
    if (width % degree != 0) {
      throw InputError(value + "a divisor of the model's " + std::to_string(width) + " " + name +
                       " (each TP rank holds an equal share)");
    }
  }
}

void validate_step_size(const Plan& plan, const ModelSpec& model) {
  // Note [Step work] (input_limits.h): checked before the lowering allocates a single op.
  const auto layers = static_cast<std::int64_t>(model.layers.size());
  const std::int64_t passes = std::int64_t{plan.grad_accumulation_steps} * layers;
  if (passes > limits::kMaxLayerPassesPerStep) {
    throw InputError("plan: grad_accumulation_steps " + std::to_string(plan.grad_accumulation_steps) + " x " +
                     std::to_string(layers) + " layers = " + std::to_string(passes) +
                     " layer passes per step: expected at most " + std::to_string(limits::kMaxLayerPassesPerStep) +
                     " (the simulated step's limit)");
  }
  // Every byte the step could allocate below 2^60, so the schedule's int64 byte counts and the simulator's sums of
  // them are exact (the UBSan overflow at simulator.cpp:278 for huge num_heads / hidden_size).
  check_step_bytes(plan.training, model, plan.grad_accumulation_steps, "plan");
}

}  // namespace shardplan
