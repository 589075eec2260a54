// One step of one plan, end to end: validate, lower to a StepSchedule, simulate — shared by estimate, simulate, plan.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "memory_headroom.h"
#include "cluster.h"
#include "hardware_profile.h"
#include "model_spec.h"
#include "pipeline_schedule.h"
#include "pipeline_simulator.h"
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

// A plan with a pipeline (Note [Pipeline policy] in plan.h): validated for the whole world, its TP slice taken
// (Note [2-D plans]), lowered into one program per pipeline rank and simulated together.
struct PipelineStepAnalysis {
  PipelineSchedule schedule;
  PipelineSimulation simulation;
};
// `record_timeline`: keep the programs' placed ops (Note [Pipeline trace] in pipeline_trace.h), named with the
// model's layer names, and the trace metadata simulate's has.
PipelineStepAnalysis analyze_pipeline_step(const ModelSpec& model, const Cluster& cluster,
                                           const HardwareProfile& profile, const Plan& plan,
                                           bool record_timeline = false);
// Its summary: the step, then one line per pipeline rank (stages, their layer indices, compute, bubble, memory,
// micro-batches in flight), with the memory verdict of Note [Memory headroom] on each rank's device peak.
std::string render_pipeline_text(const PipelineStepAnalysis& analysis, const MemoryHeadroom& headroom);
nlohmann::json to_json(const PipelineStepAnalysis& analysis, const MemoryHeadroom& headroom);

// Note [Trace fingerprint]: what a trace was made of, in its metadata ("fingerprint"), so `compare` refuses to set a
// prediction against a measurement of another model or plan: {"model": name, "parameters": count, "plan_digest":
// 16 hex digits of FNV-1a 64 over the plan's JSON without its name}. simulate and plan write it through
// analyze_step, run beside its measured trace; the plan's JSON is the one its file round-trips to, so a plan file
// simulated and run gives one digest.
nlohmann::json trace_fingerprint(const ModelSpec& model, const Plan& plan);

// The human summary of a simulation: step time, compute, exposed communication, streams, collectives, memory at peak.
// The memory verdict is Note [Memory headroom]'s: the device peak within the capacity less the headroom.
std::string render_simulation_text(const SimulationSummary& summary, const StepSchedule& schedule,
                                   const MemoryHeadroom& headroom);

}  // namespace shardplan
