// Small hand-built models and clusters shared by the memory-model tests, with numbers easy to compute by hand.
#pragma once

#include "cluster.h"
#include "memory_model.h"
#include "model_spec.h"

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

// A query on `world` ranks of one node with 1000 bytes of context overhead and 1 MB capacity; seq 8, micro-batch 2.
inline MemoryQuery hand_query(const ModelSpec& model, StrategyKind kind, int world, const char* precision) {
  MemoryQuery query;
  query.model = &model;
  query.wrapping = wrap_per_block(model);
  query.strategy.kind = kind;
  query.training.seq_len = 8;
  query.training.micro_batch = 2;
  query.training.precision = precision_recipe(precision);
  query.world_size = world;
  query.gpus_per_node = world;
  query.capacity_bytes = 1'000'000;
  query.context_overhead_bytes = 1000;
  return query;
}

}  // namespace shardplan::testing
