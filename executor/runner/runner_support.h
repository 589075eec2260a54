// What the CPU runner can execute: the checks that turn an unsupported plan into one clear InputError up front.
#pragma once

#include <vector>

#include "model_spec.h"
#include "plan.h"
#include "unit_layout.h"

namespace shardplan::runner {

// InputError (carrying `rank`) unless the plan is one this CPU executor runs exactly as scheduled:
// - fp32 precision for every copy (the kernels compute in fp32; Note [Tracked bytes] in tracking_allocator.h),
// - AdamW (the only optimizer the runtime implements),
// - no CPU offload (no h2d/d2h ops) and no partial reshard-after-forward (reshard to a smaller group),
// - every unit's parameters, gradients and optimizer states sharded over the same group (FSDP/HSDP strategies and
//   NO_SHARD; ZeRO-1/2 would need a parameter all-gather after the step that the schedule does not contain).
void check_executable(const Plan& plan, const std::vector<UnitLayout>& layouts, int rank);

}  // namespace shardplan::runner
