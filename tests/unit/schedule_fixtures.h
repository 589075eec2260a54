// Toy models and round-number hardware for schedule and simulator tests: every time and byte is computable by hand.
#pragma once

#include "hardware_profile.h"
#include "lowering.h"
#include "model_spec.h"
#include "plan.h"

namespace shardplan::testing {

// `blocks` transformer blocks of 1000 parameters; forward 1e6 FLOPs per token; 10 activation elements per token.
inline ModelSpec toy_blocks(int blocks) {
  ModelSpec model;
  model.name = "toy";
  model.hidden_size = 1;
  model.num_heads = 1;
  for (int index = 0; index < blocks; ++index) {
    LayerSpec block;
    block.name = "block." + std::to_string(index);
    block.kind = LayerKind::transformer_block;
    block.tensors = {{"w", {1000}}};
    block.flops.matmul_flops_per_token = 1e6;
    block.activations.elements_per_token = 10;
    model.layers.push_back(block);
  }
  return model;
}

// Compute: 1 GFLOP/s at full efficiency (forward of a toy block on 4 tokens = 4 ms). Links: 1 MB/s, no latency, full
// efficiency at every size (a 2-rank all-gather of a 4000-byte unit = ½ × 4000 / 1e6 = 2 ms). No overlap slowdown.
inline HardwareProfile round_profile() {
  HardwareProfile profile;
  profile.device = "round";
  profile.gpus_per_node = 8;
  profile.peak_bf16_flops = profile.peak_fp16_flops = profile.peak_fp32_flops = 1e9;
  profile.max_compute_efficiency = 1.0;
  profile.half_efficiency_flops = 0.0;
  profile.hbm_bytes_per_s = 1e15;
  profile.memory_efficiency = 1.0;
  profile.pcie_bytes_per_s = 1e6;
  profile.intra_node = {"link", 0.0, 1e6, 1.0};
  profile.inter_node = {"fabric", 0.0, 1e6, 1.0};
  profile.comm_half_efficiency_bytes = 0.0;
  profile.set_overlap_slowdown(1.0);
  profile.context_overhead_bytes = 0;
  return profile;
}

// fp32 (no casts), AdamW, seq 4, micro-batch 1; one unit per block; FSDP's default one-ahead prefetch.
// round_profile with communication all but free: only compute and a pipeline's dependencies set the step.
inline HardwareProfile compute_bound_profile() {
  HardwareProfile profile = round_profile();
  profile.intra_node = {"link", 0.0, 1e18, 1.0};
  profile.inter_node = {"fabric", 0.0, 1e18, 1.0};
  profile.pcie_bytes_per_s = 1e18;
  return profile;
}

inline Plan toy_plan(const ModelSpec& model, int world, StrategyKind kind = StrategyKind::full_shard) {
  TrainingConfig training;
  training.seq_len = 4;
  training.micro_batch = 1;
  training.precision = precision_recipe("fp32");
  ShardingStrategy strategy;
  strategy.kind = kind;
  return default_plan(model, training, strategy, wrap_per_block(model), world);
}

inline LoweringOptions toy_options(int world) {
  LoweringOptions options;
  options.world_size = world;
  options.gpus_per_node = 8;
  return options;
}

}  // namespace shardplan::testing
