// op_durations: every op's base duration and overlap slowdown in a schedule (op_placement.h's base_duration_s and
// overlap_slowdown), each distinct kernel set and collective priced once by the cost model — what the simulator, the
// pipeline simulator and the search's windows time.
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
// The slowdown rides along (Note [Overlap slowdown by kernel kind]): it weighs the same kernel times, so it is priced
// with the duration, once per shape, and the walks' hot loops only read it.
struct OpDurations {
  std::vector<double> base_s;            // per op: base_duration_s
  std::vector<double> overlap_slowdown;  // per op: overlap_slowdown
};
OpDurations op_durations(const StepSchedule& schedule, const HardwareProfile& profile);
// op_durations' base_s alone.
std::vector<double> base_durations_s(const StepSchedule& schedule, const HardwareProfile& profile);

}  // namespace shardplan
