// The plan search's knob settings: sharding strategies (hybrid shard groups included), activation checkpointing
// patterns, micro-batches for a fixed global batch and expert-parallel degrees; the per-block plan each setting
// starts from and its prefetch-depth variants.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "errors.h"
#include "search.h"

namespace shardplan {
namespace {

std::string strategy_text(const ShardingStrategy& strategy) {
  std::string text = to_string(strategy.kind);
  if (strategy.shard_group_size > 0) text += ":" + std::to_string(strategy.shard_group_size);
  return text;
}

std::vector<ShardingStrategy> strategies_for(const Cluster& cluster) {
  const int world = cluster.world_size();
  std::vector<ShardingStrategy> result;
  const auto add = [&](StrategyKind kind, int group) {
    ShardingStrategy strategy;
    strategy.kind = kind;
    strategy.shard_group_size = group;
    result.push_back(strategy);
  };
  add(StrategyKind::full_shard, 0);
  add(StrategyKind::shard_grad_op, 0);
  add(StrategyKind::no_shard, 0);
  // Hybrid shard groups (the shard group size; replicas = world / group): divisors of the GPUs per node (the
  // shard group stays on one node's fast links), and whole numbers of nodes that divide the world (the shard group
  // spans nodes: fewer replicas, so less memory per GPU than one node's group, for models that need it — ZeRO++'s
  // hierarchical partitioning and FSDP2's 2-D device mesh allow any such shape). Always below the world, which is
  // full_shard.
  const auto add_hybrid = [&](int group) {
    if (world % group != 0 || group >= world || group < 2) return;
    add(StrategyKind::hybrid_shard, group);
    add(StrategyKind::hybrid_shard_zero2, group);
  };
  for (int group = 2; group <= cluster.gpus_per_node; ++group) {
    if (cluster.gpus_per_node % group == 0) add_hybrid(group);
  }
  for (int nodes = 2; nodes < cluster.nodes; ++nodes) add_hybrid(nodes * cluster.gpus_per_node);
  return result;
}

// Checkpointing patterns: none, selective (only when the scores are materialised), full, torchtitan's selective-op
// policy on every block, and partial ones — full recompute on the first quarter, half or three quarters of the
// blocks ("25%", "50%", "75%"), since every block saves the same memory and checkpointing only as many as the cap
// needs costs the least recompute.
void apply_checkpointing(Plan& plan, const ModelSpec& model, const TrainingConfig& training, const KnobSetting& knobs) {
  const std::string& pattern = knobs.ac;
  std::size_t blocks_seen = 0;
  std::size_t checkpointed = 0;
  if (pattern == "full") checkpointed = model.block_count();
  if (pattern == "25%" || pattern == "50%" || pattern == "75%") {
    checkpointed = model.block_count() * static_cast<std::size_t>(std::stoi(pattern)) / 100;
  }
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind != LayerKind::transformer_block) continue;
    ActivationCheckpointing mode = ActivationCheckpointing::none;
    if (blocks_seen < checkpointed) mode = ActivationCheckpointing::full;
    if (pattern == "selective") mode = ActivationCheckpointing::selective;
    if (pattern == "selective-op") mode = ActivationCheckpointing::selective_op;
    // Note [Pinned knobs]: the user's --ac on every --ac-every-th block, as estimate and simulate apply it.
    if (knobs.ac_given) mode = block_checkpointing(training, blocks_seen);
    plan.layer_checkpointing[layer] = mode;
    ++blocks_seen;
  }
}

// The strategy's layout where it must carry expert parallelism: Note [Expert parallelism] (unit_layout.h) — the
// experts' shards split the shard group into EP groups, so only strategies that shard parameters and gradients alike
// over a multiple of the degree take it.
bool carries_expert_parallel(const ShardingStrategy& strategy, int degree, const Cluster& cluster) {
  if (degree <= 1) return true;
  const ShardingLayout layout = resolve_sharding(strategy, cluster.world_size(), cluster.gpus_per_node);
  return layout.params_sharded() && layout.grad_group == layout.param_group && layout.param_group % degree == 0;
}

}  // namespace

std::string KnobSetting::label() const {
  return strategy_text(strategy) + ", AC " + ac + ", micro-batch " + std::to_string(micro_batch) +
         (offload ? ", CPU offload" : "");
}

bool KnobPins::admits(const Plan& plan) const {
  if (offload && plan.offload.params != *offload) return false;
  if (strategy) {
    for (const auto& unit : plan.units) {
      if (unit.strategy.kind != strategy->kind || unit.strategy.shard_group_size != strategy->shard_group_size) {
        return false;
      }
    }
  }
  if (tensor_parallel && plan.tensor_parallel_degree != *tensor_parallel) return false;
  if (expert_parallel && plan.training.expert_parallel_degree != *expert_parallel) return false;
  // Checkpointing and micro-batch: a baseline is built from the training, so it keeps the pinned ones.
  return true;
}

std::vector<KnobSetting> knob_settings(const Cluster& cluster, const TrainingConfig& training, bool offload,
                                       const KnobPins& pins) {
  if (pins.offload && *pins.offload != offload) return {};
  std::vector<std::int64_t> micro_batches = {training.micro_batch};
  if (training.global_batch > 0 && !pins.micro_batch) {
    // A fixed global batch: every micro-batch that divides it evenly (the rest is gradient accumulation).
    micro_batches.clear();
    const std::int64_t per_rank = training.global_batch / cluster.world_size();
    for (std::int64_t micro = 1; micro <= per_rank; micro *= 2) {
      if (training.global_batch % (micro * cluster.world_size()) == 0) micro_batches.push_back(micro);
    }
    if (micro_batches.empty()) micro_batches.push_back(1);  // the global-batch error surfaces in lowering
    // Note [Optimizer in backward]: no gradient accumulation, so all of a rank's sequences in one micro-batch.
    if (training.optimizer_in_backward) micro_batches = {std::max<std::int64_t>(1, per_rank)};
  }
  std::vector<std::string> patterns = {"none", "25%", "50%", "75%", "full", "selective-op"};
  if (!training.flash_attention) patterns.push_back("selective");
  if (pins.whole_model_checkpointing) patterns = {"none", "full", "selective-op"};
  if (pins.checkpointing) {
    std::string given = to_string(training.checkpointing);
    if (training.checkpoint_every_blocks > 1) given += " every " + std::to_string(training.checkpoint_every_blocks);
    patterns = {given};
  }
  const std::vector<ShardingStrategy> strategies =
      pins.strategy ? std::vector<ShardingStrategy>{*pins.strategy} : strategies_for(cluster);
  std::vector<KnobSetting> settings;
  for (const auto& strategy : strategies) {
    if (!carries_expert_parallel(strategy, training.expert_parallel_degree, cluster)) continue;
    if (offload && pins.offload_at_zero3_only && zero_stage(strategy.kind) != 3) continue;
    for (const auto& pattern : patterns) {
      for (auto micro : micro_batches) settings.push_back({strategy, pattern, micro, offload, pins.checkpointing});
    }
  }
  return settings;
}

SearchOptions search_options_for(const KnobPins& pins, const ModelSpec& model, const Cluster& cluster,
                                 SearchOptions options) {
  options.pins = pins;
  const bool offload = pins.offload.value_or(false);
  if (offload && pins.tensor_parallel && *pins.tensor_parallel > 1) {
    throw InputError("--cpu-offload with --tensor-parallel " + std::to_string(*pins.tensor_parallel) +
                     ": not yet supported (expected --tensor-parallel 1, or no --cpu-offload)");
  }
  // Offload with TP is not yet supported (validate_plan): pinning offload on leaves FSDP alone.
  options.tensor_parallel_degrees = pins.tensor_parallel ? std::vector<int>{*pins.tensor_parallel}
                                    : offload             ? std::vector<int>{1}
                                                          : std::vector<int>{1, 2, 4, 8};
  options.expert_parallel_degrees =
      pins.expert_parallel ? std::vector<int>{*pins.expert_parallel} : expert_parallel_candidates(model, cluster);
  if (pins.offload) options.allow_offload = *pins.offload;
  if (pins.strategy && pins.expert_parallel &&
      !carries_expert_parallel(*pins.strategy, *pins.expert_parallel, cluster)) {
    const std::string degree = std::to_string(*pins.expert_parallel);
    throw InputError("--strategy " + strategy_text(*pins.strategy) + " with --expert-parallel " + degree +
                     ": expected a strategy sharding parameters and gradients over a multiple of " + degree +
                     " ranks (full_shard)");
  }
  return options;
}

Plan plan_for_knobs(const ModelSpec& model, const Cluster& cluster, const TrainingConfig& training,
                    const KnobSetting& knobs) {
  return plan_for_knobs(model, cluster.world_size(), training, knobs);
}

Plan plan_for_knobs(const ModelSpec& model, int data_parallel_ranks, const TrainingConfig& training,
                    const KnobSetting& knobs) {
  TrainingConfig adjusted = training;
  adjusted.micro_batch = knobs.micro_batch;
  Plan plan = default_plan(model, adjusted, knobs.strategy, wrap_per_block(model), data_parallel_ranks);
  apply_checkpointing(plan, model, training, knobs);
  plan.offload.params = knobs.offload;
  return plan;
}

Plan with_prefetch_depth(const Plan& plan, int depth) {
  SHARDPLAN_CHECK(depth == 0 || depth == 2, "prefetch depth variants are 0 and 2");
  Plan variant = plan;
  const int count = static_cast<int>(plan.units.size());
  if (depth == 0) {
    for (auto& unit : variant.units) unit.forward_prefetch = unit.backward_prefetch = {};
    return variant;
  }
  for (int id = 0; id < count; ++id) {
    auto& unit = variant.units[static_cast<std::size_t>(id)];
    if (id + 2 < count) unit.forward_prefetch = {id + 1, id + 2};
    if (id >= 3) unit.backward_prefetch = {id - 1, id - 2};
    if (id == 0 && count > 2) unit.backward_prefetch = {count - 1, count - 2};
  }
  variant.max_inflight_all_gathers = 3;  // two gathers ahead and the one in use
  return variant;
}

std::int64_t smallest_searched_micro_batch(const Cluster& cluster, const TrainingConfig& training,
                                           const KnobPins& pins) {
  std::int64_t smallest = training.micro_batch;
  const bool offload = pins.offload.value_or(false);
  for (const KnobSetting& knobs : knob_settings(cluster, training, offload, pins)) {
    smallest = std::min(smallest, knobs.micro_batch);
  }
  return smallest;
}

std::vector<int> expert_parallel_candidates(const ModelSpec& model, const Cluster& cluster) {
  std::int64_t experts = 0;  // the gcd of the MoE blocks' expert counts
  for (const LayerSpec& layer : model.layers) {
    if (layer.moe) experts = std::gcd(experts, layer.moe->num_experts);
  }
  std::vector<int> degrees = {1};
  if (experts == 0) return degrees;  // no experts: nothing to search
  // validate_expert_parallel refuses EP when fine-tuning: not a candidate then (a pinned degree still says so).
  if (!model.finetune.trains_all()) return degrees;
  for (int degree = 2; degree <= cluster.gpus_per_node && degree <= experts; degree *= 2) {
    if (experts % degree == 0 && cluster.world_size() % degree == 0) degrees.push_back(degree);
  }
  return degrees;
}

}  // namespace shardplan
