// Per-unit sizes for lowering: padding to the shard group (FSDP1 FlatParameter), shards, gathered and gradient copies;
// per-layer activation bytes.
#include "unit_layout.h"

#include <algorithm>
#include <cmath>

#include "errors.h"
#include "pass_kernels.h"

namespace shardplan {
namespace {

std::int64_t round_up(std::int64_t count, int group) {
  const std::int64_t g = std::max(group, 1);
  return (count + g - 1) / g * g;
}

}  // namespace

UnitParams unit_params(const ModelSpec& model, const std::vector<std::size_t>& layers) {
  UnitParams params;
  for (const std::size_t index : layers) {
    const LayerSpec& layer = model.layers[index];
    if (layer.moe) params.routed_expert += layer.moe->routed_expert_elements;
    if (!layer.finetune) {
      params.fp8_weights += fp8_weight_elements(layer);
      params.trainable += layer.param_count();
      continue;
    }
    params.trainable += layer.finetune->trainable_elements;
    params.frozen += layer.finetune->frozen_elements;
    params.packed_bytes += layer.finetune->packed_bytes;
    params.quant_constant_bytes += layer.finetune->quant_constant_bytes;
  }
  return params;
}

UnitLayout unit_layout(const PlanUnit& spec, const UnitParams& params, const TrainingConfig& training, int world_size,
                       int gpus_per_node) {
  const ShardingLayout sharding = resolve_sharding(spec.strategy, world_size, gpus_per_node);
  const PrecisionRecipe& precision = training.precision;
  const bool fsdp1 = training.finetune.fsdp.version == 1;
  const int compute = precision.param_compute_bytes, storage = precision.param_storage_bytes;
  // Note [Frozen parameters in FSDP]: the packed 4-bit codes as elements of the quant storage dtype (the param dtype).
  const std::int64_t quant_width = dtype_bytes(training.finetune.quant_storage(precision));
  const std::int64_t packed = (params.packed_bytes + quant_width - 1) / quant_width;
  const std::int64_t kept_low = params.frozen + packed;  // FSDP2: held in the param dtype
  UnitLayout layout;
  layout.name = spec.name;
  layout.param_count = params.trainable + kept_low;
  layout.grad_elements = fsdp1 ? (params.trainable > 0 ? layout.param_count : 0) : params.trainable;
  layout.param_group = sharding.param_group;
  layout.grad_group = sharding.grad_group;
  layout.optimizer_group = sharding.optimizer_group;
  layout.replicas = sharding.grads_sharded() ? world_size / sharding.grad_group : 1;
  layout.partial_group = spec.reshard_after_forward.keeps_partial_copy() ? spec.reshard_after_forward.group_size : 0;
  layout.gathers = sharding.params_sharded() && layout.param_count > 0;
  // Elements stored in the storage dtype (cast for compute) and in the param dtype, each padded to the shard group.
  const std::int64_t wide = fsdp1 ? round_up(layout.param_count, layout.param_group)
                                  : round_up(params.trainable, layout.param_group);
  const std::int64_t narrow = fsdp1 ? 0 : round_up(kept_low, layout.param_group);
  layout.padded_elements = wide + narrow;
  layout.shard_elements = layout.padded_elements / layout.param_group;
  layout.shard_bytes = (wide * storage + narrow * compute) / layout.param_group;
  layout.cast_shard_bytes = compute != storage ? wide / layout.param_group * compute : 0;
  layout.casts_replicated = !sharding.params_sharded() && wide > 0 && compute != storage;
  layout.grad_copies = layout.grad_elements > 0 &&
                       (sharding.grads_sharded() || precision.grad_compute_bytes != precision.grad_storage_bytes);
  layout.grad_padded_elements = round_up(layout.grad_elements, layout.grad_group);
  layout.grad_shard_elements = layout.grad_padded_elements / layout.grad_group;
  layout.optimizer_shard_elements = round_up(params.trainable, layout.optimizer_group) / layout.optimizer_group;
  layout.quant_constant_bytes = params.quant_constant_bytes;
  layout.gathered_category = spec.is_root ? MemoryCategory::root_unit : MemoryCategory::unsharded_params;
  // Gathered: every element in the param dtype; replicated, only the cast copy of the wide part.
  layout.gathered_bytes = (layout.gathers ? layout.padded_elements : wide) * compute;
  // Note [Float8 training] (precision.h): torchao's fp8 all-gather (FSDP2 only: fsdp_pre_all_gather) casts the fp8
  // projections' weight shards to float8 before the gather — 1 byte per element instead of the compute dtype's — and
  // the unsharded copy is that float8 tensor; every other parameter gathers as before.
  if (precision.fp8_all_gather && !fsdp1 && layout.gathers) {
    layout.gathered_bytes -= params.fp8_weights * (compute - 1);
  }
  if (layout.partial_group > 0) {
    layout.partial_copy_bytes = layout.padded_elements / layout.partial_group * compute;
  }
  layout.grad_copy_bytes = layout.grad_padded_elements * precision.grad_compute_bytes;
  const int expert_parallel = training.expert_parallel_degree;
  if (expert_parallel > 1 && params.routed_expert > 0) {  // Note [Expert parallelism]
    if (!layout.gathers || layout.param_group % expert_parallel != 0 || layout.grad_group != layout.param_group) {
      throw InputError("expert_parallel_degree " + std::to_string(expert_parallel) +
                       ": expected a divisor of the unit's shard group of " + std::to_string(layout.param_group) +
                       " ranks, parameters and gradients sharded alike (full_shard, shard_grad_op or hybrid_shard)");
    }
    layout.remote_expert_elements = params.routed_expert - params.routed_expert / expert_parallel;
    layout.gathered_bytes -= layout.remote_expert_elements * compute;
    layout.grad_copy_bytes -= layout.remote_expert_elements * precision.grad_compute_bytes;
    if (layout.partial_group > 0) {
      layout.partial_copy_bytes =
          (layout.padded_elements - layout.remote_expert_elements) / layout.partial_group * compute;
    }
  }
  return layout;
}

UnitLayout states_floor_layout(const ShardingStrategy& strategy, const ModelSpec& model, const TrainingConfig& training,
                               int world_size, int gpus_per_node) {
  std::vector<std::size_t> every_layer(model.layers.size());
  for (std::size_t layer = 0; layer < every_layer.size(); ++layer) every_layer[layer] = layer;
  return states_floor_layout(strategy, model, every_layer, training, world_size, gpus_per_node);
}

UnitLayout states_floor_layout(const ShardingStrategy& strategy, const ModelSpec& model,
                               const std::vector<std::size_t>& layers, const TrainingConfig& training, int world_size,
                               int gpus_per_node) {
  PlanUnit whole;
  whole.strategy = strategy;
  const UnitParams params = unit_params(model, layers);
  UnitLayout layout = unit_layout(whole, params, training, world_size, gpus_per_node);
  if (layout.grad_elements > params.trainable) {
    layout.grad_elements = params.trainable;
    layout.grad_padded_elements = round_up(params.trainable, layout.grad_group);
    layout.grad_shard_elements = layout.grad_padded_elements / layout.grad_group;
    layout.grad_copy_bytes = layout.grad_padded_elements * training.precision.grad_compute_bytes;
  }
  return layout;
}

std::vector<UnitLayout> unit_layouts(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node) {
  const auto units = plan_units(plan, model);
  std::vector<UnitLayout> layouts;
  for (std::size_t id = 0; id < units.size(); ++id) {
    const PlanUnit& spec = plan.units[id];
    try {
      layouts.push_back(unit_layout(spec, unit_params(model, units[id].layers), plan.training, world_size, gpus_per_node));
    } catch (const InputError& error) {
      throw InputError("plan: unit " + std::to_string(id) + " ('" + spec.name + "'): " + error.what());
    }
  }
  return layouts;
}

std::int64_t padding_elements(const std::vector<UnitLayout>& layouts) {
  std::int64_t padding = 0;
  for (const UnitLayout& layout : layouts) padding += layout.padded_elements - layout.param_count;
  return padding;
}

MemoryByCategory persistent_memory(const std::vector<UnitLayout>& layouts, const Plan& plan,
                                   std::int64_t context_overhead_bytes) {
  MemoryByCategory persistent{};
  const auto& precision = plan.training.precision;
  const auto add = [&](MemoryCategory category, std::int64_t bytes) {
    persistent[static_cast<std::size_t>(category)] += bytes;
  };
  for (const auto& layout : layouts) {
    // Note [Quantisation constants] (costmodel/finetune_apply.h): on the device whatever is offloaded.
    add(MemoryCategory::sharded_params, layout.quant_constant_bytes);
    if (!plan.offload.params) {
      add(MemoryCategory::sharded_params, layout.shard_bytes);
      // Note [Optimizer in backward] (optimizer_in_backward.h): each unit's gradient lives only until its own step.
      if (!plan.training.optimizer_in_backward) {
        add(MemoryCategory::sharded_grads, layout.grad_shard_elements * precision.grad_storage_bytes);
      }
    }
    if (!plan.offload.params && !plan.offload.optimizer) {
      add(MemoryCategory::optimizer_states,
          optimizer_held_bytes(precision, plan.training.optimizer, layout.optimizer_shard_elements));
    }
  }
  add(MemoryCategory::overhead, context_overhead_bytes);
  return persistent;
}

std::int64_t kept_activation_bytes(const ModelSpec& model, const TrainingConfig& training, std::size_t layer,
                                   ActivationCheckpointing mode) {
  const LayerSpec& spec = model.layers[layer];
  const double per_token = spec.activation_bytes_per_token(training.seq_len, training.precision.param_compute_bytes,
                                                           training.attention_activations(), mode,
                                                           training.torch_compile);
  const auto tokens = static_cast<double>(training.tokens_per_micro_batch(spec));
  return static_cast<std::int64_t>(std::llround(per_token * tokens));
}

ActivationCheckpointing layer_checkpointing_of(const Plan& plan, const ModelSpec& model, std::size_t layer) {
  return model.layers[layer].kind == LayerKind::transformer_block ? plan.layer_checkpointing[layer]
                                                                  : ActivationCheckpointing::none;
}

std::int64_t recomputed_activation_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer) {
  const ActivationCheckpointing mode = layer_checkpointing_of(plan, model, layer);
  if (mode == ActivationCheckpointing::none) return 0;
  const std::int64_t rebuilt = kept_activation_bytes(model, plan.training, layer, ActivationCheckpointing::none) -
                               kept_activation_bytes(model, plan.training, layer, mode);
  return std::max<std::int64_t>(rebuilt, 0);
}

namespace {

// Per token of `layer` (Note [Tokens per sample] in model_spec.h) to per micro-batch.
std::int64_t per_micro_batch(double bytes_per_token, const LayerSpec& layer, const TrainingConfig& training) {
  return static_cast<std::int64_t>(
      std::llround(bytes_per_token * static_cast<double>(training.tokens_per_micro_batch(layer))));
}

}  // namespace

std::int64_t dequantized_weight_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer) {
  const auto& finetune = model.layers[layer].finetune;
  if (!finetune || finetune->largest_quantized_weight == 0) return 0;
  const TrainingConfig& training = plan.training;
  return finetune->largest_quantized_weight * dtype_bytes(training.finetune.quant_compute(training.precision));
}

std::int64_t largest_activation_tensor_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer) {
  const TrainingConfig& training = plan.training;
  const LayerSpec& spec = model.layers[layer];
  const double per_token = spec.largest_tensor_bytes_per_token(training.seq_len, training.precision.param_compute_bytes,
                                                               training.attention_activations());
  return std::max(per_micro_batch(per_token, spec, training), dequantized_weight_bytes(plan, model, layer));
}

std::int64_t forward_workspace_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer) {
  const int element_bytes = plan.training.precision.param_compute_bytes;
  return recomputed_activation_bytes(plan, model, layer) +
         per_micro_batch(model.layers[layer].forward_workspace_bytes_per_token(element_bytes), model.layers[layer],
                         plan.training) +
         dequantized_weight_bytes(plan, model, layer);
}

std::int64_t backward_workspace_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer) {
  const int element_bytes = plan.training.precision.param_compute_bytes;
  const auto& finetune = model.layers[layer].finetune;
  const bool runs = !finetune || finetune->backward_needed;
  const std::int64_t dequantized = runs ? dequantized_weight_bytes(plan, model, layer) : 0;
  return per_micro_batch(model.layers[layer].backward_workspace_bytes_per_token(element_bytes), model.layers[layer],
                         plan.training) +
         dequantized;
}

double optimizer_bytes_per_element(const PrecisionRecipe& precision, OptimizerKind optimizer) {
  return 2.0 * precision.param_storage_bytes + precision.grad_storage_bytes +
         2.0 * optimizer_held_bytes_per_element(precision, optimizer);
}

}  // namespace shardplan
