// Small hand-built models and clusters shared by the memory-model tests, with numbers easy to compute by hand.
#pragma once

#include "memory_bound.h"
#include "model_spec.h"
#include "plan.h"

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

// The closed-form bound of `plan` on `world` ranks of one node with 1000 bytes of context overhead.
inline MemoryBreakdown hand_bound(const ModelSpec& model, const Plan& plan, int world) {
  return memory_upper_bound(plan, model, world, world, 1000);
}

}  // namespace shardplan::testing
