// One step of one plan, end to end: validate, lower to a StepSchedule, simulate — shared by estimate, simulate, plan.
#pragma once

#include <string>

#include "memory_headroom.h"
#include "cluster.h"
#include "hardware_profile.h"
#include "model_spec.h"
#include "plan.h"
#include "schedule.h"
#include "simulator.h"

namespace shardplan {

struct StepAnalysis {
  StepSchedule schedule;
  SimulationResult simulation;
};

StepAnalysis analyze_step(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                          const Plan& plan, bool record_timeline);

// The human summary of a simulation: step time, compute, exposed communication, streams, collectives, memory at peak.
// The memory verdict is Note [Memory headroom]'s: the device peak within the capacity less the headroom.
std::string render_simulation_text(const SimulationSummary& summary, const StepSchedule& schedule,
                                   const MemoryHeadroom& headroom);

}  // namespace shardplan
