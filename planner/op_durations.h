// base_durations_s: every op's base duration in a schedule (op_placement.h's base_duration_s), each distinct kernel
// set and collective priced once by the cost model — what the simulator and the search's windows time.
#pragma once

#include <vector>

#include "hardware_profile.h"
#include "schedule.h"

namespace shardplan {

// Note [Durations by shape]: an op's base duration depends on its shape alone — a layer pass's kernels (PassKernels,
// which the lowering interns so that equal layer passes share one object: Lowerer::kernels_of) plus its zero-filled
// bytes; a collective's kind, bytes and group placement; a copy's bytes. A 405B step has 1271 ops of a dozen shapes,
// and pricing a pass walks all its GEMMs, so re-pricing every op was most of a simulation (issue 32's profile: 43 %).
// Each shape is priced once per schedule with the same cost functions and operands as base_duration_s, so every op
// gets bit for bit the duration base_duration_s gives it; only the repetition is gone.
std::vector<double> base_durations_s(const StepSchedule& schedule, const HardwareProfile& profile);

}  // namespace shardplan
