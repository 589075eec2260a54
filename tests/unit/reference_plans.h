// The plan search's reference, written from the documented knobs and FSDP's defaults instead of the search's own
// knob_settings / plan_for_knobs / plan_with_units / with_prefetch_depth, so a knob missing from the search or a plan
// wired differently shows up as a difference (issue 22, item 6).
#pragma once

#include <string>
#include <vector>

#include "cluster.h"
#include "model_spec.h"
#include "plan.h"
#include "sharding.h"
#include "training.h"

namespace shardplan::testing {

// One knob setting as README's `plan` section lists them.
struct ReferenceSetting {
  std::string strategy;  // as --strategy spells it: full_shard, shard_grad_op, no_shard, hybrid_shard:G, ...
  std::string ac;        // none, 25%, 50%, 75%, full; selective where attention scores are materialised
  std::int64_t micro_batch = 1;
  bool offload = false;
};

// Strategies: full_shard, shard_grad_op, no_shard; HSDP (both variants) over every shard group G with 2 <= G < world
// that divides the world and either divides a node or is a whole number of nodes. Micro-batches: powers of two whose
// accumulation divides a fixed global batch (the training's micro-batch without one).
inline std::vector<ReferenceSetting> reference_settings(const Cluster& cluster, const TrainingConfig& training,
                                                        bool offload) {
  const int world = cluster.world_size(), per_node = cluster.gpus_per_node;
  std::vector<std::string> strategies = {"full_shard", "shard_grad_op", "no_shard"};
  for (int group = 2; group < world; ++group) {
    const bool in_node = per_node % group == 0;
    const bool whole_nodes = group % per_node == 0;
    if (world % group != 0 || !(in_node || whole_nodes)) continue;
    strategies.push_back("hybrid_shard:" + std::to_string(group));
    strategies.push_back("hybrid_shard_zero2:" + std::to_string(group));
  }
  std::vector<std::string> patterns = {"none", "25%", "50%", "75%", "full", "selective-op"};
  if (!training.flash_attention) patterns.push_back("selective");
  std::vector<std::int64_t> micro_batches;
  if (training.global_batch > 0) {
    for (std::int64_t micro = 1; micro <= training.global_batch / world; micro *= 2) {
      if (training.global_batch % (micro * world) == 0) micro_batches.push_back(micro);
    }
  } else {
    micro_batches.push_back(training.micro_batch);
  }
  std::vector<ReferenceSetting> settings;
  for (const auto& strategy : strategies) {
    for (const auto& pattern : patterns) {
      for (const auto micro : micro_batches) settings.push_back({strategy, pattern, micro, offload});
    }
  }
  return settings;
}

// The next up to `depth` units in a pass's order: forward 1, 2, ..., n-1 after the root; backward the root (its head)
// first, then n-1 down to 1.
inline std::vector<int> reference_prefetch(int id, int count, int depth, bool forward) {
  std::vector<int> order;
  if (forward) {
    for (int unit = 0; unit < count; ++unit) order.push_back(unit);
  } else {
    order.push_back(0);
    for (int unit = count - 1; unit >= 1; --unit) order.push_back(unit);
  }
  std::vector<int> next;
  for (std::size_t at = 0; at < order.size(); ++at) {
    if (order[at] != id) continue;
    for (std::size_t ahead = at + 1; ahead < order.size() && next.size() < static_cast<std::size_t>(depth); ++ahead) {
      next.push_back(order[ahead]);
    }
  }
  return next;
}

// The plan FSDP2 runs for a setting and a wrapping: unit 0 the root (every layer outside the ranges, kept gathered
// from forward to backward), one unit per range with the setting's strategy, resharded after forward where the
// strategy does (FULL_SHARD, HYBRID_SHARD; NO_SHARD's copies) unless kept gathered, `depth` units prefetched ahead (FSDP1's rate limiter
// raised to the gathers in flight), full recompute on the first quarter / half / three quarters / all blocks.
inline Plan reference_plan(const ModelSpec& model, const TrainingConfig& training, const ReferenceSetting& setting,
                           const std::vector<LayerRange>& ranges, const std::vector<bool>& kept, int world_size,
                           int depth = 1) {
  Plan plan;
  plan.model = model.name;
  plan.training = training;
  plan.training.micro_batch = setting.micro_batch;
  plan.grad_accumulation_steps =
      training.global_batch > 0 ? static_cast<int>(training.global_batch / (setting.micro_batch * world_size)) : 1;
  plan.max_inflight_all_gathers = depth >= 2 ? depth + 1 : 2;
  plan.offload.params = setting.offload;
  const ShardingStrategy strategy = parse_strategy(setting.strategy);
  // NO_SHARD gathers nothing; its flag frees only the compute-dtype copy after forward, as FULL_SHARD would.
  const bool reshards = strategy.kind == StrategyKind::full_shard || strategy.kind == StrategyKind::hybrid_shard ||
                        strategy.kind == StrategyKind::no_shard;
  const int count = static_cast<int>(ranges.size()) + 1;
  for (int id = 0; id < count; ++id) {
    PlanUnit unit;
    unit.is_root = id == 0;
    if (id > 0) unit.layers = ranges[static_cast<std::size_t>(id - 1)];
    unit.name = id == 0 ? "root" : "unit" + std::to_string(id);
    unit.strategy = strategy;
    unit.reshard_after_forward.enabled = id > 0 && reshards && (kept.empty() || !kept[static_cast<std::size_t>(id - 1)]);
    unit.forward_prefetch = reference_prefetch(id, count, depth, true);
    unit.backward_prefetch = reference_prefetch(id, count, depth, false);
    plan.units.push_back(unit);
  }
  std::size_t blocks = 0;
  for (const auto& layer : model.layers) blocks += layer.kind == LayerKind::transformer_block ? 1 : 0;
  std::size_t checkpointed = 0;
  if (setting.ac == "full") checkpointed = blocks;
  if (setting.ac == "25%") checkpointed = blocks / 4;
  if (setting.ac == "50%") checkpointed = blocks / 2;
  if (setting.ac == "75%") checkpointed = blocks * 3 / 4;
  plan.layer_checkpointing.assign(model.layers.size(), ActivationCheckpointing::none);
  std::size_t block = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind != LayerKind::transformer_block) continue;
    if (block < checkpointed) plan.layer_checkpointing[layer] = ActivationCheckpointing::full;
    if (setting.ac == "selective") plan.layer_checkpointing[layer] = ActivationCheckpointing::selective;
    if (setting.ac == "selective-op") plan.layer_checkpointing[layer] = ActivationCheckpointing::selective_op;
    ++block;
  }
  return plan;
}

// The first field in which two plans differ for the lowering (names aside), or "" when none does.
inline std::string plan_difference(const Plan& a, const Plan& b) {
  if (a.units.size() != b.units.size()) {
    return "unit count " + std::to_string(a.units.size()) + " vs " + std::to_string(b.units.size());
  }
  for (std::size_t id = 0; id < a.units.size(); ++id) {
    const PlanUnit &x = a.units[id], &y = b.units[id];
    const std::string at = "unit " + std::to_string(id) + ": ";
    if (x.is_root != y.is_root) return at + "is_root";
    if (!x.is_root && (x.layers.begin != y.layers.begin || x.layers.end != y.layers.end)) return at + "layers";
    if (x.strategy.kind != y.strategy.kind || x.strategy.shard_group_size != y.strategy.shard_group_size) {
      return at + "strategy";
    }
    if (x.reshard_after_forward.enabled != y.reshard_after_forward.enabled ||
        x.reshard_after_forward.group_size != y.reshard_after_forward.group_size) {
      return at + "reshard_after_forward";
    }
    if (x.forward_prefetch != y.forward_prefetch) return at + "forward_prefetch";
    if (x.backward_prefetch != y.backward_prefetch) return at + "backward_prefetch";
  }
  if (a.layer_checkpointing != b.layer_checkpointing) return "layer_checkpointing";
  if (a.grad_accumulation_steps != b.grad_accumulation_steps) return "grad_accumulation_steps";
  if (a.max_inflight_all_gathers != b.max_inflight_all_gathers) return "max_inflight_all_gathers";
  if (a.offload.params != b.offload.params || a.offload.optimizer != b.offload.optimizer) return "offload";
  const TrainingConfig &s = a.training, &t = b.training;
  if (s.seq_len != t.seq_len || s.micro_batch != t.micro_batch || s.global_batch != t.global_batch ||
      s.precision.name != t.precision.name || s.optimizer != t.optimizer || s.flash_attention != t.flash_attention ||
      s.no_sync_accumulation != t.no_sync_accumulation) {
    return "training";
  }
  return "";
}

}  // namespace shardplan::testing
