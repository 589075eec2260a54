// Per-unit sizes for lowering: padding to the shard group (FSDP1 FlatParameter), shards, gathered and gradient copies;
// per-layer activation bytes.
#include "unit_layout.h"

#include <algorithm>
#include <cmath>

#include "errors.h"

namespace shardplan {
namespace {

std::int64_t round_up(std::int64_t count, int group) {
  const std::int64_t g = std::max(group, 1);
  return (count + g - 1) / g * g;
}

}  // namespace

UnitLayout unit_layout(const PlanUnit& spec, std::int64_t param_count, const PrecisionRecipe& precision, int world_size,
                       int gpus_per_node) {
  const ShardingLayout sharding = resolve_sharding(spec.strategy, world_size, gpus_per_node);
  UnitLayout layout;
  layout.name = spec.name;
  layout.param_count = param_count;
  layout.param_group = sharding.param_group;
  layout.grad_group = sharding.grad_group;
  layout.optimizer_group = sharding.optimizer_group;
  layout.replicas = sharding.grads_sharded() ? world_size / sharding.grad_group : 1;
  layout.partial_group = spec.reshard_after_forward.keeps_partial_copy() ? spec.reshard_after_forward.group_size : 0;
  layout.gathers = sharding.params_sharded() && layout.param_count > 0;
  layout.casts_replicated = !sharding.params_sharded() && layout.param_count > 0 &&
                            precision.param_compute_bytes != precision.param_storage_bytes;
  layout.grad_copies = layout.param_count > 0 &&
                       (sharding.grads_sharded() || precision.grad_compute_bytes != precision.grad_storage_bytes);
  layout.padded_elements = round_up(layout.param_count, layout.param_group);
  layout.shard_elements = layout.padded_elements / layout.param_group;
  layout.grad_padded_elements = round_up(layout.param_count, layout.grad_group);
  layout.grad_shard_elements = layout.grad_padded_elements / layout.grad_group;
  layout.optimizer_shard_elements = round_up(layout.param_count, layout.optimizer_group) / layout.optimizer_group;
  layout.gathered_category = spec.is_root ? MemoryCategory::root_unit : MemoryCategory::unsharded_params;
  layout.gathered_bytes = layout.padded_elements * precision.param_compute_bytes;
  if (layout.partial_group > 0) {
    layout.partial_copy_bytes = layout.padded_elements / layout.partial_group * precision.param_compute_bytes;
  }
  layout.grad_copy_bytes = layout.grad_padded_elements * precision.grad_compute_bytes;
  return layout;
}

std::vector<UnitLayout> unit_layouts(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node) {
  const auto units = plan_units(plan, model);
  std::vector<UnitLayout> layouts;
  for (std::size_t id = 0; id < units.size(); ++id) {
    const PlanUnit& spec = plan.units[id];
    try {
      layouts.push_back(unit_layout(spec, units[id].param_count, plan.training.precision, world_size, gpus_per_node));
    } catch (const InputError& error) {
      throw InputError("plan: unit " + std::to_string(id) + " ('" + spec.name + "'): " + error.what());
    }
  }
  return layouts;
}

MemoryByCategory persistent_memory(const std::vector<UnitLayout>& layouts, const Plan& plan,
                                   std::int64_t context_overhead_bytes) {
  MemoryByCategory persistent{};
  const auto& precision = plan.training.precision;
  const auto add = [&](MemoryCategory category, std::int64_t bytes) {
    persistent[static_cast<std::size_t>(category)] += bytes;
  };
  for (const auto& layout : layouts) {
    if (!plan.offload.params) {
      add(MemoryCategory::sharded_params, layout.shard_elements * precision.param_storage_bytes);
      add(MemoryCategory::sharded_grads, layout.grad_shard_elements * precision.grad_storage_bytes);
    }
    if (!plan.offload.params && !plan.offload.optimizer) {
      add(MemoryCategory::optimizer_states,
          layout.optimizer_shard_elements * optimizer_bytes_per_param(precision, plan.training.optimizer));
    }
  }
  add(MemoryCategory::overhead, context_overhead_bytes);
  return persistent;
}

std::int64_t kept_activation_bytes(const ModelSpec& model, const TrainingConfig& training, std::size_t layer,
                                   ActivationCheckpointing mode) {
  const double per_token = model.layers[layer].activation_bytes_per_token(
      training.seq_len, training.precision.param_compute_bytes, training.flash_attention, mode);
  return static_cast<std::int64_t>(std::llround(per_token * static_cast<double>(training.tokens_per_micro_batch())));
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

std::int64_t per_micro_batch(double bytes_per_token, const TrainingConfig& training) {
  return static_cast<std::int64_t>(std::llround(bytes_per_token * static_cast<double>(training.tokens_per_micro_batch())));
}

}  // namespace

std::int64_t forward_workspace_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer) {
  const int element_bytes = plan.training.precision.param_compute_bytes;
  return recomputed_activation_bytes(plan, model, layer) +
         per_micro_batch(model.layers[layer].forward_workspace_bytes_per_token(element_bytes), plan.training);
}

std::int64_t backward_workspace_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer) {
  const int element_bytes = plan.training.precision.param_compute_bytes;
  return per_micro_batch(model.layers[layer].backward_workspace_bytes_per_token(element_bytes), plan.training);
}

std::int64_t optimizer_bytes_per_element(const PrecisionRecipe& precision, OptimizerKind optimizer) {
  return 2 * precision.param_storage_bytes + precision.grad_storage_bytes +
         2 * optimizer_bytes_per_param(precision, optimizer);
}

}  // namespace shardplan
