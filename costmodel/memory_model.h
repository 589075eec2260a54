// The per-rank memory model: model states, transient buffers and activations for a wrapping, strategy and training.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster.h"
#include "memory_category.h"
#include "model_spec.h"
#include "sharding.h"
#include "training.h"
#include "wrapping.h"

namespace shardplan {

// Everything the memory model needs to know about one configuration.
struct MemoryQuery {
  const ModelSpec* model = nullptr;
  Wrapping wrapping;
  ShardingStrategy strategy;
  TrainingConfig training;
  int world_size = 1;
  int gpus_per_node = 1;
  std::int64_t capacity_bytes = 0;          // device memory per rank
  std::int64_t context_overhead_bytes = 0;  // runtime context and workspaces (calibratable)
  int prefetch_units = 1;                   // units gathered ahead of the one computing (FSDP default: 1)
  int max_gathered_units = 2;               // FSDP1's rate limiter: at most two units gathered and not yet freed
};

MemoryQuery memory_query_for(const ModelSpec& model, const Cluster& cluster, const Wrapping& wrapping,
                             const ShardingStrategy& strategy, const TrainingConfig& training);

// Per-rank bytes at the peak of a training step, by term. See Note [Peak at backward start] in memory_model.cpp.
struct MemoryBreakdown {
  std::int64_t sharded_params_bytes = 0;    // this rank's parameter shard (the whole set when replicated)
  std::int64_t sharded_grads_bytes = 0;     // this rank's accumulated gradient shard (the whole when replicated)
  std::int64_t optimizer_states_bytes = 0;  // master weights and optimizer states of this rank's shard
  std::int64_t unsharded_params_bytes = 0;  // gathered copies of the non-root units in flight
  std::int64_t root_unit_bytes = 0;         // the root unit, gathered from forward until backward ends
  std::int64_t unsharded_grads_bytes = 0;   // full-size gradients of the units in backward (or of all, with no_sync)
  std::int64_t comm_buffers_bytes = 0;      // all-gather input casts and reduce-scatter outputs
  std::int64_t activation_bytes = 0;        // kept for backward, plus the recompute working set with full AC
  std::int64_t overhead_bytes = 0;          // runtime context and workspaces
  std::int64_t padding_elements = 0;        // elements added by right-padding flat parameters (counted above)

  std::int64_t model_states_bytes() const { return sharded_params_bytes + sharded_grads_bytes + optimizer_states_bytes; }
  std::int64_t total_bytes() const;
  // Named terms in a fixed order, as printed and as keyed in JSON ("sharded_params", ...).
  std::vector<std::pair<std::string, std::int64_t>> terms() const;
  std::string dominant_term() const;
};

struct MemoryEstimate {
  MemoryBreakdown breakdown;
  ShardingLayout layout;
  std::vector<UnitInfo> units;
  std::int64_t param_count = 0;
  std::int64_t capacity_bytes = 0;
  std::int64_t grad_accumulation_steps = 1;
  bool fits() const { return breakdown.total_bytes() <= capacity_bytes; }
};

// Note [Closed form and schedule]: estimate_memory is the closed form of the peak; it charges every transient term at
// its largest at once, so it bounds the simulated peak of the same plan from above (equal in model states). The
// numbers `estimate` and `simulate` print come from the schedule's simulated peak (breakdown_from_categories).
MemoryEstimate estimate_memory(const MemoryQuery& query);

// The same terms from bytes by category (a simulated or measured peak).
MemoryBreakdown breakdown_from_categories(const MemoryByCategory& bytes, std::int64_t padding_elements);

nlohmann::json to_json(const MemoryBreakdown& breakdown);

}  // namespace shardplan
