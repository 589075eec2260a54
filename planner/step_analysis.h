// One step of one plan, end to end: validate, lower to a StepSchedule, simulate — shared by estimate, simulate, plan.
#pragma once

#include <string>

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
std::string render_simulation_text(const SimulationSummary& summary, const StepSchedule& schedule,
                                   const Cluster& cluster);

}  // namespace shardplan
