// Per-rank memory by term (model states, transient buffers, activations) and the estimate that reports it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory_category.h"
#include "sharding.h"
#include "wrapping.h"

namespace shardplan {

// Per-rank bytes at the peak of a training step, by term: a simulated or measured peak (breakdown_from_categories).
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

// The same terms from bytes by category (a simulated or measured peak).
MemoryBreakdown breakdown_from_categories(const MemoryByCategory& bytes, std::int64_t padding_elements);

nlohmann::json to_json(const MemoryBreakdown& breakdown);

}  // namespace shardplan
