// Small hand-built models and clusters shared by the memory-model tests, with numbers easy to compute by hand.
#pragma once

#include <algorithm>

#include "cluster.h"
#include "hardware_profile.h"
#include "lowering.h"
#include "memory_model.h"
#include "model_spec.h"
#include "plan.h"
#include "simulator.h"
#include "unit_layout.h"

namespace shardplan::testing {

// embedding 1002 | block 4000 | block 6001 | block 5000 | norm 10 | head 1000 (6 layers, Ψ = 17013).
// Activations per token: each block 10 elements (+1 score element per position, 4 flash bytes, keeps 2 with full
// AC); the head 3 elements + 8 fp32 bytes; embedding and norm nothing.
inline ModelSpec hand_model() {
  ModelSpec model;
  model.name = "hand";
  model.hidden_size = 2;
  model.num_heads = 1;
  const auto layer = [](const char* name, LayerKind kind, std::int64_t params) {
    LayerSpec spec;
    spec.name = name;
    spec.kind = kind;
    spec.tensors = {{"w", {params}}};
    return spec;
  };
  model.layers = {layer("emb", LayerKind::embedding, 1002), layer("b0", LayerKind::transformer_block, 4000),
                  layer("b1", LayerKind::transformer_block, 6001), layer("b2", LayerKind::transformer_block, 5000),
                  layer("norm", LayerKind::norm, 10),     layer("head", LayerKind::lm_head, 1000)};
  for (auto& spec : model.layers) {
    if (spec.kind == LayerKind::transformer_block) {
      spec.activations.elements_per_token = 10;
      spec.activations.score_elements_per_token_per_position = 1;
      spec.activations.flash_stat_bytes_per_token = 4;
      spec.activations.checkpoint_elements_per_token = 2;
    }
  }
  model.layers[5].activations.elements_per_token = 3;
  model.layers[5].activations.fp32_bytes_per_token = 8;
  return model;
}

// seq 8, micro-batch 2 (16 tokens per micro-batch) in `precision`, AdamW.
inline TrainingConfig hand_training(const char* precision) {
  TrainingConfig training;
  training.seq_len = 8;
  training.micro_batch = 2;
  training.precision = precision_recipe(precision);
  return training;
}

// FSDP's usual plan for the model (one unit per block) with `kind` on `world` ranks.
inline Plan hand_plan(const ModelSpec& model, StrategyKind kind, int world, const TrainingConfig& training,
                      int shard_group_size = 0) {
  ShardingStrategy strategy;
  strategy.kind = kind;
  strategy.shard_group_size = shard_group_size;
  return default_plan(model, training, strategy, wrap_per_block(model), world);
}

// Two units prefetched ahead in both passes, in the order default_plan numbers units (the root starts forward with
// its embedding and backward with its head): forward root → 1, 2 and unit u → u+1, u+2; backward root → n-1, n-2 and
// unit u → u-1, u-2 (unit ids >= 1).
inline void prefetch_two_ahead(Plan& plan) {
  const int count = static_cast<int>(plan.units.size());
  for (int id = 0; id < count; ++id) {
    auto& unit = plan.units[static_cast<std::size_t>(id)];
    unit.forward_prefetch.clear();
    unit.backward_prefetch.clear();
    for (int ahead = 1; ahead <= 2; ++ahead) {
      if (id + ahead < count) unit.forward_prefetch.push_back(id + ahead);
      const int behind = id == 0 ? count - ahead : id - ahead;
      if (behind >= 1 && behind != id) unit.backward_prefetch.push_back(behind);
    }
  }
}

// The simulated step of `plan` on `world` ranks of one node with 1000 bytes of context overhead, H100 rates: the
// peak by term, and each term at its largest over the step (Note [Terms at their largest]).
struct HandStep {
  MemoryBreakdown peak;
  MemoryBreakdown largest;
};

// Note [Terms at their largest]: the memory tests read the lowered step through the simulator, the one description
// of what the step holds (planner/memory_walk.cpp); `largest` takes each category's maximum over the walk's samples,
// so a term is checked where it is largest even when the total peaks elsewhere.
inline HandStep hand_step(const ModelSpec& model, const Plan& plan, int world) {
  HardwareProfile profile = profile_from_cluster(parse_cluster("8xH100-80GB", HardwareCatalog::builtin()));
  profile.context_overhead_bytes = 1000;
  LoweringOptions options;
  options.world_size = world;
  options.gpus_per_node = world;
  options.context_overhead_bytes = profile.context_overhead_bytes;
  const SimulationResult result = simulate(lower_plan(plan, model, options), profile, true);
  const std::int64_t padding = padding_elements(unit_layouts(plan, model, world, world));
  MemoryByCategory largest{};
  for (const MemorySample& sample : result.timeline.memory) {
    for (std::size_t category = 0; category < kMemoryCategoryCount; ++category) {
      largest[category] = std::max(largest[category], sample.bytes[category]);
    }
  }
  return {breakdown_from_categories(result.summary.memory_at_peak, padding), breakdown_from_categories(largest, padding)};
}

}  // namespace shardplan::testing
