// The event-driven simulator: times a StepSchedule with the cost model and tracks memory by category.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware_profile.h"
#include "schedule.h"
#include "timeline.h"

namespace shardplan {

struct CollectiveTotals {
  std::string kind;  // "all_gather", "reduce_scatter", "all_reduce"
  int count = 0;
  std::int64_t bytes = 0;
  double busy_s = 0;
};

struct SimulationSummary {
  double step_time_s = 0;
  double compute_time_s = 0;   // busy time of the compute stream
  double exposed_comm_s = 0;   // step time the compute stream spends waiting (on communication or copies)
  std::vector<std::pair<std::string, double>> stream_busy_s;  // per stream, in StreamKind order
  std::vector<CollectiveTotals> collectives;
  std::int64_t peak_memory_bytes = 0;  // allocated (what the "fits" test compares with the device's memory)
  MemoryByCategory memory_at_peak{};
  // Note [Reserved memory] (memory_walk.cpp): the caching allocator's reserved peak, torch.cuda.max_memory_reserved()
  // (the overhead term, outside PyTorch's allocator, left out), and the device's (nvidia-smi's) = reserved + overhead.
  std::int64_t reserved_peak_bytes = 0;
  std::int64_t device_peak_bytes = 0;
  int peak_op_id = -1;
  std::string peak_op;         // "backward model.layers.31 (micro-batch 0)"
  std::int64_t tokens_per_step = 0;
  double tokens_per_s = 0;
  double mfu = 0;              // model FLOPs / (step time × peak)  (Korthikanti et al. 2022, §6)
  double hfu = 0;              // hardware FLOPs (with recompute) / (step time × peak)
  std::size_t op_count = 0;
};

struct SimulationResult {
  SimulationSummary summary;
  Timeline timeline;  // empty unless requested
};

// Walks the ops in schedule order (Note [Schedule order]): an op starts when its stream is free and its dependencies
// have finished (op_placement.h has the per-op rules). Compute ops run slower by the profile's overlap factor for the
// part of them during which communication runs (Note [Communication busy time]). Memory changes at op starts (frees_at_start, then allocations) and ends (frees); equal times apply
// frees first.
SimulationResult simulate(const StepSchedule& schedule, const HardwareProfile& profile, bool record_timeline = true);

// The `simulate` JSON contract: step_time_s, compute_time_s, exposed_comm_s, peak_memory_bytes, memory_at_peak,
// tokens_per_s, mfu, hfu, streams, collectives (+ peak_op, tokens_per_step, op_count).
nlohmann::json to_json(const SimulationSummary& summary);

// A readable op name for traces and messages: "forward model.layers.3", "all_gather model.layers.3".
std::string describe_op(const Op& op, const StepSchedule& schedule, const std::vector<std::string>* layer_names);

// An op's TimelineEvent on `rank`, all but its times: id, describe_op's name, kind, stream, payload, flops, unit,
// layer, micro-batch. The simulators and the runners' measured timelines start from it.
TimelineEvent timeline_event(const Op& op, const StepSchedule& schedule, int rank);

}  // namespace shardplan
