// Samples for calibration from measured timelines: each op matched to its schedule op (re-lowered from the plan the
// trace carries) gives FLOPs, bytes and group sizes next to its measured duration.
#pragma once

#include <vector>

#include "calibration.h"
#include "cluster.h"
#include "model_spec.h"
#include "plan.h"
#include "timeline.h"

namespace shardplan {

// Adds the measured ops of `measured` (every rank) to `samples`. InputError when an op id is not in the schedule.
void add_calibration_samples(const Timeline& measured, const ModelSpec& model, const Plan& plan, const Cluster& cluster,
                             const HardwareProfile& base, CalibrationSamples& samples);

}  // namespace shardplan
