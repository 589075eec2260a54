// The DeepSpeed export (ZeRO ds_config.json from the plan's units), export_plan's dispatch, format-neutral helpers.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "finetune_apply.h"
#include "finetune_json.h"
#include "name_suggest.h"
#include "export_torchtitan.h"
#include "plan_export.h"
#include "search.h"

namespace shardplan {
namespace export_detail {

std::vector<std::vector<std::string>> unit_module_paths(const Plan& plan, const ModelSpec& model) {
  std::vector<std::vector<std::string>> groups;
  for (const auto& unit : plan_units(plan, model)) {
    std::vector<std::string> paths;
    for (auto layer : unit.layers) paths.push_back(model.layers[layer].name);
    groups.push_back(std::move(paths));
  }
  return groups;
}

std::string strategy_label(const ShardingStrategy& strategy) {
  std::string label = to_string(strategy.kind);
  if (strategy.shard_group_size > 0) label += ":" + std::to_string(strategy.shard_group_size);
  return label;
}

ShardingStrategy uniform_strategy(const Plan& plan, const std::string& format) {
  SHARDPLAN_CHECK(!plan.units.empty(), "a validated plan has a root unit");
  const ShardingStrategy& first = plan.units.front().strategy;
  for (std::size_t id = 1; id < plan.units.size(); ++id) {
    const auto& strategy = plan.units[id].strategy;
    if (strategy.kind != first.kind || strategy.shard_group_size != first.shard_group_size) {
      throw InputError("--export " + format + ": unit " + std::to_string(id) + " ('" + plan.units[id].name +
                       "') uses strategy " + strategy_label(strategy) + " but the root unit uses " +
                       strategy_label(first) + "; " + format +
                       " applies one strategy to the whole model (use --export fsdp2 for per-unit strategies)");
    }
  }
  return first;
}

}  // namespace export_detail

namespace {

using export_detail::strategy_label;

// Which of DeepSpeed's two 16-bit modes the recipe is; fp32 enables neither. DeepSpeed's optimizers keep fp32 master
// weights in both, so pure-bf16's all-bf16 state costs more under DeepSpeed than the plan predicts.
struct HalfMode {
  bool bf16 = false;
  bool fp16 = false;
};

HalfMode half_mode(const PrecisionRecipe& recipe) {
  if (recipe.name == "zero-fp16") return {false, true};
  if (recipe.name == "bf16-mixed" || recipe.name == "pure-bf16") return {true, false};
  if (recipe.name == "fp32") return {};
  return {recipe.param_compute_bytes == 2, false};  // a recipe from elsewhere: 2-byte compute taken as bf16
}

// The largest 1-D tensor (norm weights, biases): ZeRO-3 keeps parameters this small unpartitioned. See Note
// [Persistence threshold] in docs/exports.md: the threshold is per parameter, not per unit.
std::int64_t largest_vector(const ModelSpec& model) {
  std::int64_t largest = 0;
  for (const auto& layer : model.layers) {
    for (const auto& tensor : layer.tensors) {
      if (tensor.shape.size() == 1) largest = std::max(largest, tensor.element_count());
    }
  }
  return largest;
}

nlohmann::ordered_json layer_names(const Plan& plan, const ModelSpec& model, ActivationCheckpointing mode) {
  auto names = nlohmann::ordered_json::array();
  for (std::size_t layer = 0; layer < model.layers.size() && layer < plan.layer_checkpointing.size(); ++layer) {
    if (plan.layer_checkpointing[layer] == mode) names.push_back(model.layers[layer].name);
  }
  return names;
}

}  // namespace

ExportedFile export_deepspeed(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node) {
  validate_plan(plan, model, world_size, gpus_per_node);
  if (plan.training.precision.uses_fp8()) {
    // torchao's float8 training composes with FSDP2 (its fp8 all-gather hooks are FSDP2's fsdp_pre_all_gather).
    throw InputError("--export deepspeed: precision '" + plan.training.precision.name +
                     "' (torchao float8 training) is expressed by the FSDP2 export only (expected --export fsdp2)");
  }
  check_export_support("deepspeed", plan, model);  // Note [Export constrains the search]: no TP, no EP
  check_export_compile("deepspeed", plan.training);  // Note [Exported compile]: refused
  check_export_recipe("deepspeed", plan.training);   // Note [Exported recipes]: refused
  check_export_activation_offload("deepspeed", plan.training);  // Note [Exported activation offloading]: refused
  check_export_optimizer_step("deepspeed", plan.training);      // Note [Exported optimizer step]
  const ShardingStrategy strategy = export_detail::uniform_strategy(plan, "deepspeed");
  const ShardingLayout layout = resolve_sharding(strategy, world_size, gpus_per_node);
  const int stage = zero_stage(strategy.kind);
  if (plan.offload.params && stage != 3) {
    throw InputError("--export deepspeed: the plan offloads parameters, but strategy " + strategy_label(strategy) +
                     " is ZeRO stage " + std::to_string(stage) + " and DeepSpeed offloads parameters only at stage 3");
  }
  if (plan.offload.optimizer && stage == 0) {
    throw InputError("--export deepspeed: the plan offloads optimizer states, but strategy no_shard is ZeRO stage 0 "
                     "and DeepSpeed offloads the optimizer only at stages 1-3");
  }

  const auto units = plan_units(plan, model);
  std::int64_t largest = 0, prefetch_bucket = 0;
  std::size_t deepest_prefetch = 0;
  int partial_group = 0;
  for (std::size_t id = 0; id < units.size(); ++id) {
    largest = std::max(largest, units[id].param_count);
    const auto& spec = plan.units[id];
    std::int64_t ahead = 0;
    for (int target : spec.forward_prefetch) ahead += units[static_cast<std::size_t>(target)].param_count;
    prefetch_bucket = std::max(prefetch_bucket, ahead);
    deepest_prefetch = std::max({deepest_prefetch, spec.forward_prefetch.size(), spec.backward_prefetch.size()});
    if (spec.reshard_after_forward.keeps_partial_copy()) {
      partial_group = std::max(partial_group, spec.reshard_after_forward.group_size);
    }
  }
  // Units gathered at once: the limiter's count, or when unlimited the unit in use plus its deepest prefetch list.
  const std::int64_t live_units = plan.max_inflight_all_gathers > 0
                                      ? plan.max_inflight_all_gathers
                                      : 1 + static_cast<std::int64_t>(deepest_prefetch);

  nlohmann::ordered_json zero;
  zero["stage"] = stage;
  zero["overlap_comm"] = true;
  zero["contiguous_gradients"] = true;
  zero["reduce_bucket_size"] = largest;
  zero["allgather_bucket_size"] = largest;
  zero["stage3_prefetch_bucket_size"] = prefetch_bucket;
  zero["stage3_param_persistence_threshold"] = largest_vector(model);
  zero["stage3_max_live_parameters"] = live_units * largest;
  zero["stage3_max_reuse_distance"] = largest;
  std::vector<std::string> notes;
  if (strategy.kind == StrategyKind::hybrid_shard) {
    zero["mics_shard_size"] = layout.param_group;  // MiCS: ZeRO-3 within groups, replicated across them (HSDP)
  } else if (strategy.kind == StrategyKind::hybrid_shard_zero2) {
    notes.push_back("hybrid_shard_zero2: DeepSpeed stage 2 shards gradients and optimizer states over all " +
                    std::to_string(world_size) + " ranks, not within groups of " + std::to_string(layout.param_group));
  }
  if (partial_group > 0 && stage == 3) zero["zero_hpz_partition_size"] = partial_group;  // ZeRO++ secondary copy
  if (std::find(plan.layer_checkpointing.begin(), plan.layer_checkpointing.end(),
                ActivationCheckpointing::selective_op) != plan.layer_checkpointing.end()) {
    // deepspeed.checkpointing recomputes whole functions; an op-level policy is torch.utils.checkpoint's.
    notes.push_back("selective-op checkpointing (torchtitan's op policy) has no DeepSpeed setting: wrap the blocks "
                    "listed under activation_checkpointing.selective_op with torch.utils.checkpoint and "
                    "create_selective_checkpoint_contexts (the fsdp2 export's _selective_op_checkpoint_context)");
  }
  // What ds_config cannot say about the trainable set (costmodel/finetune.h): it lives in the model code.
  const FinetuneConfig& finetune = plan.training.finetune;
  if (finetune.mode == FinetuneMode::frozen) {
    notes.push_back("the frozen parameters (patterns " + nlohmann::json(finetune.freeze).dump() +
                    ") are no ds_config setting: set requires_grad=False on them before deepspeed.initialize and give "
                    "the optimizer the trainable parameters only; ZeRO then keeps gradients and optimizer states for "
                    "those alone, as planned");
  }
  if (finetune.uses_lora()) {
    notes.push_back("LoRA (r=" + std::to_string(finetune.lora.r) + ", target_modules " +
                    nlohmann::json(lora_target_modules(model, finetune)).dump() +
                    ") is no ds_config setting: apply peft.get_peft_model(model, LoraConfig(...)) before "
                    "deepspeed.initialize (the fsdp2 export's LORA_CONFIG); ZeRO then reduces and steps the adapters "
                    "alone, as planned");
  }
  if (finetune.mode == FinetuneMode::qlora) {
    notes.push_back("QLoRA's 4-bit base weights cannot be expressed in ds_config: ZeRO-3 partitions them only when "
                    "transformers loads the model with a BitsAndBytesConfig whose bnb_4bit_quant_storage is the dtype "
                    "ZeRO-3 partitions (the fsdp2 export's BNB_4BIT_CONFIG); ZeRO++'s zero_quantized_weights is an "
                    "8-bit all-gather, not 4-bit storage, and is not what was planned");
  }
  const nlohmann::ordered_json cpu = {{"device", "cpu"}, {"pin_memory", true}};
  if (plan.offload.params) zero["offload_param"] = cpu;
  if (plan.offload.optimizer || plan.offload.params) zero["offload_optimizer"] = cpu;

  const HalfMode half = half_mode(plan.training.precision);
  nlohmann::ordered_json config;
  config["train_batch_size"] = plan.training.micro_batch * plan.grad_accumulation_steps * world_size;
  config["train_micro_batch_size_per_gpu"] = plan.training.micro_batch;
  config["gradient_accumulation_steps"] = plan.grad_accumulation_steps;
  config["gradient_clipping"] = 1.0;
  config["zero_allow_untested_optimizer"] = true;
  if (plan.training.optimizer == OptimizerKind::cpu_adamw) {
    // Note [Exported optimizer step]: the engine builds DeepSpeedCPUAdam over the offloaded states.
    config["optimizer"] = {{"type", "AdamW"}, {"params", {{"torch_adam", false}, {"adam_w_mode", true}}}};
    config["zero_force_ds_cpu_optimizer"] = true;
  }
  config["bf16"] = {{"enabled", half.bf16}};
  config["fp16"] = {{"enabled", half.fp16}};
  if (half.fp16) {
    // Dynamic loss scaling (loss_scale 0), DeepSpeed's documented defaults.
    config["fp16"]["loss_scale"] = 0;
    config["fp16"]["loss_scale_window"] = 1000;
    config["fp16"]["initial_scale_power"] = 16;
    config["fp16"]["hysteresis"] = 2;
    config["fp16"]["min_loss_scale"] = 1;
  }
  config["zero_optimization"] = zero;

  // Traceability. DeepSpeed reads only the top-level keys it knows, so an extra top-level key is ignored; its nested
  // sections are strict (pydantic, extra="forbid"), so nothing of ours may go inside them.
  auto trace_units = nlohmann::ordered_json::array();
  const auto paths = export_detail::unit_module_paths(plan, model);
  for (std::size_t id = 0; id < units.size(); ++id) {
    trace_units.push_back({{"name", plan.units[id].name}, {"params", units[id].param_count}, {"modules", paths[id]}});
  }
  config["shardplan"] = {
      {"schema", "shardplan.deepspeed-export/v1"},
      {"plan", plan.name},
      {"model", model.name},
      {"world_size", world_size},
      {"strategy", strategy_label(strategy)},
      {"precision", plan.training.precision.name},
      {"units", trace_units},
      {"activation_checkpointing",
       {{"full", layer_names(plan, model, ActivationCheckpointing::full)},
        {"selective", layer_names(plan, model, ActivationCheckpointing::selective)},
        {"selective_op", layer_names(plan, model, ActivationCheckpointing::selective_op)}}},
      {"notes", notes},
  };
  if (!finetune.trains_all()) {
    config["shardplan"]["finetune"] = finetune_to_json(finetune, plan.training.precision, model);
  }
  return {"ds_config.json", config.dump(2) + "\n"};
}

std::vector<std::string> export_formats() { return {"fsdp2", "fsdp1", "deepspeed", "torchtitan"}; }

std::vector<ExportedFile> export_plan(const std::string& format, const Plan& plan, const ModelSpec& model,
                                      int world_size, int gpus_per_node) {
  check_export_recipe(format, plan.training);  // Note [Exported recipes]: before any file is built
  check_export_activation_offload(format, plan.training);  // Note [Exported activation offloading]
  check_export_optimizer_step(format, plan.training);      // Note [Exported optimizer step]
  if (format == "fsdp2") return {export_fsdp2(plan, model, world_size, gpus_per_node)};
  if (format == "fsdp1") return {export_fsdp1(plan, model, world_size, gpus_per_node)};
  if (format == "deepspeed") return {export_deepspeed(plan, model, world_size, gpus_per_node)};
  if (format == "torchtitan") return {export_torchtitan(plan, model, world_size, gpus_per_node)};
  throw InputError("--export '" + format + "': unknown export format" + did_you_mean(format, export_formats()) +
                   "; expected fsdp2, fsdp1, deepspeed or torchtitan");
}

void restrict_offload_to_export(const std::string& format, KnobPins& pins) {
  if (format != "deepspeed") return;
  // DeepSpeed's offload_param exists at stage 3 alone (export_deepspeed refuses the rest): the plan's CPU offload
  // moves parameter shards, so only a ZeRO-3 strategy can carry it.
  pins.offload_at_zero3_only = true;
  if (pins.offload.value_or(false) && pins.strategy && zero_stage(pins.strategy->kind) != 3) {
    throw InputError("--cpu-offload with --strategy " + export_detail::strategy_label(*pins.strategy) +
                     " and --export deepspeed: DeepSpeed offloads parameters only at ZeRO stage 3 (expected "
                     "--strategy full_shard, hybrid_shard or zero3)");
  }
}

}  // namespace shardplan
