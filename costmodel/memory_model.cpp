// The per-rank memory model: one set of formulas for every strategy, evaluated at the step's peak.
#include "memory_model.h"

#include <algorithm>
#include <cmath>

#include "errors.h"
#include "precision.h"

namespace shardplan {

// Note [Peak at backward start]:
// In a step the memory high-water mark falls at the start of backward (Korthikanti et al. 2022, §4; PyTorch's FSDP
// memory tracker shows the same): every layer's activations are still held, the loss logits exist, the root unit is
// gathered (it holds the head that backward starts with), the first non-root units of backward are gathered or being
// prefetched, and the root unit's full-size gradient has been allocated by the head's backward. We charge two more
// non-root units' full-size gradients (one waiting for its reduce-scatter while the next is produced), which is
// conservative by the activations backward has already freed by then.
// With no_sync accumulation every unit keeps its unsharded gradient across micro-batches, so all of them count.
// Model states (params, grads, optimizer) are charged per rank as ceil(Ψ_unit / group) × bytes per element, with the
// group being 1 for a replicated state; the ZeRO paper's §5 formulas are these with the zero-fp16 recipe.

std::int64_t MemoryBreakdown::total_bytes() const {
  std::int64_t total = 0;
  for (const auto& [name, bytes] : terms()) total += bytes;
  return total;
}

std::vector<std::pair<std::string, std::int64_t>> MemoryBreakdown::terms() const {
  return {{"sharded_params", sharded_params_bytes},
          {"sharded_grads", sharded_grads_bytes},
          {"optimizer_states", optimizer_states_bytes},
          {"unsharded_params", unsharded_params_bytes},
          {"root_unit", root_unit_bytes},
          {"unsharded_grads", unsharded_grads_bytes},
          {"comm_buffers", comm_buffers_bytes},
          {"activations", activation_bytes},
          {"overhead", overhead_bytes}};
}

std::string MemoryBreakdown::dominant_term() const {
  const auto all = terms();
  return std::max_element(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

MemoryQuery memory_query_for(const ModelSpec& model, const Cluster& cluster, const Wrapping& wrapping,
                             const ShardingStrategy& strategy, const TrainingConfig& training) {
  MemoryQuery query;
  query.model = &model;
  query.wrapping = wrapping;
  query.strategy = strategy;
  query.training = training;
  query.world_size = cluster.world_size();
  query.gpus_per_node = cluster.gpus_per_node;
  query.capacity_bytes = cluster.gpu.memory_bytes;
  query.context_overhead_bytes = cluster.gpu.context_overhead_bytes;
  return query;
}

namespace {

// Bytes of one model state over all units: Σ ceil(Ψ_unit / group) × bytes per element.
std::int64_t state_bytes(const std::vector<UnitInfo>& units, int group, std::int64_t bytes_per_element) {
  std::int64_t total = 0;
  for (const auto& unit : units) total += unit.shard_count(group) * bytes_per_element;
  return total;
}

std::int64_t activation_bytes(const ModelSpec& model, const TrainingConfig& training) {
  const auto& precision = training.precision;
  const double tokens = static_cast<double>(training.tokens_per_micro_batch());
  double kept = 0, largest_block_full = 0;
  for (const auto& layer : model.layers) {
    kept += layer.activation_bytes_per_token(training.seq_len, precision.param_compute_bytes,
                                             training.flash_attention, training.checkpointing);
    if (layer.kind == LayerKind::transformer_block) {
      largest_block_full = std::max(
          largest_block_full, layer.activation_bytes_per_token(training.seq_len, precision.param_compute_bytes,
                                                               training.flash_attention, ActivationCheckpointing::none));
    }
  }
  // With full recompute, one block's activations are rebuilt during its backward (Korthikanti §4.1).
  if (training.checkpointing == ActivationCheckpointing::full) kept += largest_block_full;
  return static_cast<std::int64_t>(std::llround(kept * tokens));
}

}  // namespace

MemoryEstimate estimate_memory(const MemoryQuery& query) {
  SHARDPLAN_CHECK(query.model != nullptr, "memory query without a model");
  if (query.prefetch_units < 0) throw InputError("prefetch: expected a non-negative number of units");
  if (query.max_gathered_units < 1) throw InputError("max gathered units: expected at least 1");
  const ModelSpec& model = *query.model;
  const TrainingConfig& training = query.training;
  const PrecisionRecipe& precision = training.precision;
  validate_training(training, model);

  MemoryEstimate estimate;
  estimate.layout = resolve_sharding(query.strategy, query.world_size, query.gpus_per_node);
  estimate.units = resolve_units(model, query.wrapping);
  estimate.param_count = model.param_count();
  estimate.capacity_bytes = query.capacity_bytes;
  const int data_parallel_ranks = query.world_size;  // every rank sees its own micro-batch (no tensor parallelism)
  estimate.grad_accumulation_steps = training.grad_accumulation_steps(data_parallel_ranks);
  const ShardingLayout& layout = estimate.layout;
  const auto& units = estimate.units;
  MemoryBreakdown& memory = estimate.breakdown;

  // Model states.
  memory.sharded_params_bytes = state_bytes(units, layout.param_group, precision.param_storage_bytes);
  memory.sharded_grads_bytes = state_bytes(units, layout.grad_group, precision.grad_storage_bytes);
  memory.optimizer_states_bytes =
      state_bytes(units, layout.optimizer_group, optimizer_bytes_per_param(precision, training.optimizer));
  for (const auto& unit : units) memory.padding_elements += unit.padded_count(layout.param_group) - unit.param_count;

  // Gathered parameter copies: needed when parameters are sharded, or when the compute dtype differs from the
  // stored one (FSDP NO_SHARD with MixedPrecision casts each unit to bf16 before use).
  const bool gathered_copies = layout.params_sharded() || precision.param_compute_bytes != precision.param_storage_bytes;
  const bool grad_copies = layout.grads_sharded() || precision.grad_compute_bytes != precision.grad_storage_bytes;
  const auto unsharded = [&](const UnitInfo& unit, int bytes) { return unit.padded_count(layout.param_group) * bytes; };

  std::vector<std::int64_t> block_unit_elements;  // non-root units, largest first
  for (const auto& unit : units) {
    if (!unit.is_root) block_unit_elements.push_back(unit.padded_count(layout.param_group));
  }
  std::sort(block_unit_elements.rbegin(), block_unit_elements.rend());

  if (gathered_copies) {
    memory.root_unit_bytes = unsharded(units.front(), precision.param_compute_bytes);
    // Resharded after forward: the unit in backward plus its prefetched successors, capped by the rate limiter.
    // Not resharded (SHARD_GRAD_OP, HYBRID_SHARD_ZERO2): every unit stays gathered from forward into backward.
    const std::size_t in_flight =
        layout.reshard_after_forward
            ? std::min<std::size_t>(block_unit_elements.size(),
                                    static_cast<std::size_t>(std::min(1 + query.prefetch_units, query.max_gathered_units)))
            : block_unit_elements.size();
    for (std::size_t i = 0; i < in_flight; ++i) {
      memory.unsharded_params_bytes += block_unit_elements[i] * precision.param_compute_bytes;
    }
  }

  if (grad_copies) {
    const bool keeps_all = training.no_sync_accumulation && estimate.grad_accumulation_steps > 1;
    if (keeps_all) {
      for (const auto& unit : units) memory.unsharded_grads_bytes += unsharded(unit, precision.grad_compute_bytes);
    } else {
      // The root's gradient lives through all of backward; a unit's gradient waits for its reduction while the
      // next unit's backward produces another: two non-root units at once.
      memory.unsharded_grads_bytes = unsharded(units.front(), precision.grad_compute_bytes);
      for (std::size_t i = 0; i < std::min<std::size_t>(2, block_unit_elements.size()); ++i) {
        memory.unsharded_grads_bytes += block_unit_elements[i] * precision.grad_compute_bytes;
      }
    }
  }

  // Communication buffers for the largest unit: the low-precision copy of the shard that feeds the all-gather (FSDP1
  // MixedPrecision `_mp_shard`), and the reduce-scatter output before it is accumulated into the sharded gradient.
  std::int64_t largest_shard = 0;
  for (const auto& unit : units) largest_shard = std::max(largest_shard, unit.shard_count(layout.param_group));
  if (layout.params_sharded() && precision.param_compute_bytes != precision.param_storage_bytes) {
    memory.comm_buffers_bytes += largest_shard * precision.param_compute_bytes;
  }
  if (layout.grads_sharded()) {
    std::int64_t largest_grad_shard = 0;
    for (const auto& unit : units) largest_grad_shard = std::max(largest_grad_shard, unit.shard_count(layout.grad_group));
    memory.comm_buffers_bytes += largest_grad_shard * precision.reduce_bytes;
  }

  memory.activation_bytes = activation_bytes(model, training);
  memory.overhead_bytes = query.context_overhead_bytes;
  return estimate;
}

MemoryBreakdown breakdown_from_categories(const MemoryByCategory& bytes, std::int64_t padding_elements) {
  const auto at = [&](MemoryCategory category) { return bytes[static_cast<std::size_t>(category)]; };
  MemoryBreakdown breakdown;
  breakdown.sharded_params_bytes = at(MemoryCategory::sharded_params);
  breakdown.sharded_grads_bytes = at(MemoryCategory::sharded_grads);
  breakdown.optimizer_states_bytes = at(MemoryCategory::optimizer_states);
  breakdown.unsharded_params_bytes = at(MemoryCategory::unsharded_params);
  breakdown.root_unit_bytes = at(MemoryCategory::root_unit);
  breakdown.unsharded_grads_bytes = at(MemoryCategory::unsharded_grads);
  breakdown.comm_buffers_bytes = at(MemoryCategory::comm_buffers);
  breakdown.activation_bytes = at(MemoryCategory::activations);
  breakdown.overhead_bytes = at(MemoryCategory::overhead);
  breakdown.padding_elements = padding_elements;
  return breakdown;
}

nlohmann::json to_json(const MemoryBreakdown& breakdown) {
  nlohmann::json document = nlohmann::json::object();
  for (const auto& [name, bytes] : breakdown.terms()) document[name + "_bytes"] = bytes;
  document["model_states_bytes"] = breakdown.model_states_bytes();
  document["padding_elements"] = breakdown.padding_elements;
  document["total_bytes"] = breakdown.total_bytes();
  document["dominant_term"] = breakdown.dominant_term();
  return document;
}

}  // namespace shardplan
