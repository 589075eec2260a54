// Lowering: Plan → StepSchedule, the one description of what FSDP does in a step (see Note [Schedule order]).
#pragma once

#include <cstdint>

#include "model_spec.h"
#include "plan.h"
#include "schedule.h"

namespace shardplan {

struct LoweringOptions {
  int world_size = 1;
  int gpus_per_node = 1;
  std::int64_t context_overhead_bytes = 0;  // the persistent overhead term (runtime context, workspaces)
};

// Validates the plan (InputError naming the unit) and lowers it. Per micro-batch: forward segments in layer order
// (all-gather, wait, forward ops, free when resharded after forward), then backward segments in reverse (all-gather,
// wait, recompute + backward ops, free, reduce-scatter / all-reduce when this micro-batch synchronises); after the
// last micro-batch, the optimizer step. Prefetch lists and the all-gather rate limiter decide where all-gathers are
// issued; see Note [Lowering] in lowering.cpp.
StepSchedule lower_plan(const Plan& plan, const ModelSpec& model, const LoweringOptions& options);

}  // namespace shardplan
