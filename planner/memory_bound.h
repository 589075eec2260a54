// The closed-form upper bound on a plan's per-rank peak memory, from the per-unit sizes the lowering allocates.
#pragma once

#include <cstdint>

#include "memory_model.h"
#include "model_spec.h"
#include "plan.h"

namespace shardplan {

// Per-rank bytes no instant of the plan's lowered step exceeds, by term (Note [Closed-form bound] in
// memory_bound.cpp): the model states and overhead the step starts with (persistent_memory, so they equal the
// simulated peak's), and every transient term at its largest at once. Costs O(units² + layers); no schedule is built.
// InputError when the plan does not fit the model or the world (validate_plan).
MemoryBreakdown memory_upper_bound(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node,
                                   std::int64_t context_overhead_bytes);

}  // namespace shardplan
