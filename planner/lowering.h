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
  // Flatten the memory changes for the simulator (Note [Memory effects table] in memory_effects.h). The search's
  // windows and floors, which read ops and never simulate the whole schedule, leave it off: building it there cost
  // the 405B plan 15 % more CPU and a third more memory (planner_bench).
  bool flatten_memory_effects = true;
};

// Validates the plan (InputError naming the unit) and lowers it. Per micro-batch: forward segments in layer order
// (all-gather, wait, forward ops, free when resharded after forward), then backward segments in reverse (all-gather,
// wait, recompute + backward ops, free, reduce-scatter / all-reduce when this micro-batch synchronises); after the
// last micro-batch, the optimizer step. Prefetch lists and the all-gather rate limiter decide where all-gathers are
// issued; see Note [Lowering] below.
StepSchedule lower_plan(const Plan& plan, const ModelSpec& model, const LoweringOptions& options);

// The step's optimizer op over `shard_elements` of this rank's shards (its dependencies are the caller's): the fused
// optimizer streams every shard byte once, on the device or, when offloaded, in host memory.
// With the optimizer in backward (Note [Optimizer in backward]) it moves nothing: the units were stepped already.
Op optimizer_step_op(std::int64_t shard_elements, const Plan& plan);
// One optimizer step over `shard_elements`, whichever the plan: the fused step's traffic over them.
Op unit_optimizer_step_op(std::int64_t shard_elements, const Plan& plan);

// Note [Lowering]:
// - A segment is a maximal run of consecutive layers of one unit; the root unit usually has two (embedding first,
//   final norm and head last). Forward walks segments in order, backward in reverse.
// - A unit's all-gather is requested by its own first segment of a pass or, earlier, by a unit that lists it in its
//   forward/backward prefetch list, requested right after that unit's own wait: FSDP2's pre_forward/pre_backward
//   unshard, wait_for_unshard, then prefetch (FSDPParamGroup.pre_backward; FSDP1's _pre_backward_hook waits for the
//   unshard stream before _prefetch_handle too). The host issues the prefetch after the wait, which matters when
//   issuing costs host time (HardwareProfile::collective_issue_overhead_s); the all-gather stream runs one gather at
//   a time, so the prefetch never started before that wait's gather ended anyway.
// - Rate limiter (FSDP1 limit_all_gathers, its free-event queue): the n-th gathered unit that will be freed may not
//   start before the free of the (n − limit)-th; a request whose condition is not met yet waits (in order) until
//   that free is issued and then depends on it. Units that stay gathered for the pass do not count.
// - An all-gather also waits for the compute op issued before it (its issue point), as FSDP's streams do.
// - Memory: ops allocate at their start and free at their end. Gathered parameters belong to the all-gather and are
//   freed by free_unsharded; activations are kept from forward to the layer's backward; a recompute allocates the
//   difference to a layer's full activations, freed by its backward; a unit's full-size gradient is allocated by its
//   first backward op and freed by the reduction (kept across no_sync micro-batches). That op also zero-fills it
//   (Op::zeroed_bytes), as both runners do: measured on CPU ranks, a whole-model unit's first backward op (the
//   head's) ran 3.1 ms against 0.44-0.5 ms for the same layer in a one-block-per-unit plan.

}  // namespace shardplan
