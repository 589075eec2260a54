// Parsing of strategy names and their resolution to parameter / gradient / optimizer shard groups.
#include "sharding.h"

#include <charconv>

#include "errors.h"
#include "name_suggest.h"

namespace shardplan {
namespace {

constexpr StrategyKind kAllKinds[] = {StrategyKind::full_shard,   StrategyKind::shard_grad_op,
                                      StrategyKind::no_shard,     StrategyKind::hybrid_shard,
                                      StrategyKind::hybrid_shard_zero2, StrategyKind::zero1,
                                      StrategyKind::zero2,        StrategyKind::zero3};

bool is_hybrid(StrategyKind kind) {
  return kind == StrategyKind::hybrid_shard || kind == StrategyKind::hybrid_shard_zero2;
}

}  // namespace

const char* to_string(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::full_shard: return "full_shard";
    case StrategyKind::shard_grad_op: return "shard_grad_op";
    case StrategyKind::no_shard: return "no_shard";
    case StrategyKind::hybrid_shard: return "hybrid_shard";
    case StrategyKind::hybrid_shard_zero2: return "hybrid_shard_zero2";
    case StrategyKind::zero1: return "zero1";
    case StrategyKind::zero2: return "zero2";
    case StrategyKind::zero3: return "zero3";
  }
  return "full_shard";
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (auto kind : kAllKinds) names.emplace_back(to_string(kind));
  return names;
}

bool reshards_after_forward(StrategyKind kind) {
  return kind != StrategyKind::shard_grad_op && kind != StrategyKind::hybrid_shard_zero2;
}

int zero_stage(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::full_shard:
    case StrategyKind::zero3:
    case StrategyKind::hybrid_shard: return 3;
    case StrategyKind::shard_grad_op:
    case StrategyKind::zero2:
    case StrategyKind::hybrid_shard_zero2: return 2;
    case StrategyKind::zero1: return 1;
    case StrategyKind::no_shard: return 0;
  }
  return 3;
}

ShardingStrategy parse_strategy(const std::string& text) {
  const auto colon = text.find(':');
  const std::string name = text.substr(0, colon);
  ShardingStrategy strategy;
  bool found = false;
  for (auto kind : kAllKinds) {
    if (name == to_string(kind)) {
      strategy.kind = kind;
      found = true;
    }
  }
  if (!found) throw InputError("--strategy '" + text + "': unknown strategy" + did_you_mean(name, strategy_names()));
  if (colon != std::string::npos) {
    if (!is_hybrid(strategy.kind)) {
      throw InputError("--strategy '" + text + "': a shard group size applies only to hybrid_shard[_zero2]");
    }
    const std::string size_text = text.substr(colon + 1);
    int size = 0;
    const auto [end, error] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size);
    if (error != std::errc() || end != size_text.data() + size_text.size() || size < 1) {
      throw InputError("--strategy '" + text + "': expected a positive shard group size after ':'");
    }
    strategy.shard_group_size = size;
  }
  return strategy;
}

ShardingLayout resolve_sharding(const ShardingStrategy& strategy, int world_size, int gpus_per_node) {
  if (world_size < 1) throw InputError("cluster: expected at least one GPU");
  ShardingLayout layout;
  layout.kind = strategy.kind;
  layout.world_size = world_size;
  const int world = world_size;
  switch (strategy.kind) {
    case StrategyKind::full_shard:
    case StrategyKind::zero3:
      layout.param_group = layout.grad_group = layout.optimizer_group = world;
      break;
    case StrategyKind::shard_grad_op:
      layout.param_group = layout.grad_group = layout.optimizer_group = world;
      layout.reshard_after_forward = false;
      break;
    case StrategyKind::no_shard:
      break;
    case StrategyKind::zero1:
      layout.optimizer_group = world;
      break;
    case StrategyKind::zero2:
      layout.grad_group = layout.optimizer_group = world;
      break;
    case StrategyKind::hybrid_shard:
    case StrategyKind::hybrid_shard_zero2: {
      const int group = strategy.shard_group_size > 0 ? strategy.shard_group_size : std::min(gpus_per_node, world);
      if (group > world || world % group != 0) {
        throw InputError("--strategy " + std::string(to_string(strategy.kind)) + ": shard group size " +
                         std::to_string(group) + " does not divide the world size " + std::to_string(world));
      }
      layout.param_group = layout.grad_group = layout.optimizer_group = group;
      layout.reshard_after_forward = strategy.kind == StrategyKind::hybrid_shard;
      break;
    }
  }
  // Replicas of one shard: the data-parallel copies that all-reduce across (HSDP); 1 for ZeRO-style full sharding.
  layout.replicas = world / std::max(layout.param_group, std::max(layout.grad_group, layout.optimizer_group));
  return layout;
}

}  // namespace shardplan
