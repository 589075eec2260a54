// Sharding strategies (FSDP's and the ZeRO paper's stages) and their resolution to shard groups for a world size.
#pragma once

#include <string>
#include <vector>

namespace shardplan {

enum class StrategyKind { full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2, zero1, zero2, zero3 };
const char* to_string(StrategyKind kind);
std::vector<std::string> strategy_names();

struct ShardingStrategy {
  StrategyKind kind = StrategyKind::full_shard;
  int shard_group_size = 0;  // hybrid strategies only; 0 = the GPUs of one node
};

// Whether a strategy frees gathered parameters after forward (false for SHARD_GRAD_OP and HYBRID_SHARD_ZERO2).
bool reshards_after_forward(StrategyKind kind);
// The DeepSpeed ZeRO stage a strategy is (Rajbhandari et al. 2020, §5: 1 shards the optimizer states, 2 the
// gradients too, 3 the parameters too): full_shard, zero3 and hybrid_shard 3; shard_grad_op, zero2 and
// hybrid_shard_zero2 2; zero1 1; no_shard 0.
int zero_stage(StrategyKind kind);

// "full_shard", "hybrid_shard", "hybrid_shard:4" (shard group of 4). InputError with the closest names when unknown.
ShardingStrategy parse_strategy(const std::string& text);

// How each part of the model state is split for one world size. A group of 1 means replicated on every rank.
// Note [Strategies as groups]: every strategy is the same three choices — over how many ranks parameters, gradients
// and optimizer states are partitioned, and whether gathered parameters are freed after forward — so the memory
// model and the schedule treat them with one set of formulas, and the ZeRO stages fall out as special cases:
// stage 1 = optimizer only, stage 2 = + gradients, stage 3 = + parameters (Rajbhandari et al. 2020, §5).
struct ShardingLayout {
  StrategyKind kind = StrategyKind::full_shard;
  int world_size = 1;
  int param_group = 1;
  int grad_group = 1;
  int optimizer_group = 1;
  int replicas = 1;  // data-parallel copies of one shard group (hybrid: world / shard group)
  bool reshard_after_forward = true;

  bool params_sharded() const { return param_group > 1; }
  bool grads_sharded() const { return grad_group > 1; }
  // A ZeRO-1/2 rank holds the whole parameter set; FSDP strategies gather parameters unit by unit.
  bool gathers_params() const { return param_group > 1; }
};

// InputError when a shard group does not divide the world size or exceeds it.
ShardingLayout resolve_sharding(const ShardingStrategy& strategy, int world_size, int gpus_per_node);

}  // namespace shardplan
