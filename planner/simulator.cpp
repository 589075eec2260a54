// Event-driven simulation of a StepSchedule: op timing from the cost model, overlap slowdown, memory by category.
#include "simulator.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "errors.h"
#include "memory_walk.h"
#include "op_durations.h"
#include "op_placement.h"

namespace shardplan {

std::string describe_op(const Op& op, const StepSchedule& schedule, const std::vector<std::string>* layer_names) {
  std::string name = to_string(op.kind);
  if (op.layer >= 0) {
    name += " " + (layer_names != nullptr && static_cast<std::size_t>(op.layer) < layer_names->size()
                       ? (*layer_names)[static_cast<std::size_t>(op.layer)]
                       : "layer " + std::to_string(op.layer));
  } else if (op.unit >= 0 && static_cast<std::size_t>(op.unit) < schedule.unit_names.size()) {
    name += " " + schedule.unit_names[static_cast<std::size_t>(op.unit)];
  }
  if (schedule.micro_batches > 1 && op.kind != OpKind::optimizer_step) {
    name += " (micro-batch " + std::to_string(op.micro_batch) + ")";
  }
  return name;
}

TimelineEvent timeline_event(const Op& op, const StepSchedule& schedule, int rank) {
  TimelineEvent event;
  event.op_id = op.id;
  event.name = describe_op(op, schedule, nullptr);
  event.kind = to_string(op.kind);
  event.stream = to_string(op.stream);
  event.rank = rank;
  event.bytes = op.bytes;
  event.flops = op.flops;
  event.unit = op.unit;
  event.layer = op.layer;
  event.micro_batch = op.micro_batch;
  return event;
}

namespace {

// One pass of the timing walk: every op's start and end, and each stream's busy time.
struct Placement {
  std::vector<double> start, end;
  std::array<double, kStreamCount> stream_busy{};
  double step_time_s = 0;
};

// Note [Collective slowdown]: a collective progresses HardwareProfile::overlap_collective_slowdown times slower while
// its rank computes (on CPU ranks the compute and MPI threads share cores; on GPUs NCCL kernels share SMs and memory
// bandwidth with compute kernels). Its end is where its base duration of progress is done, at rate 1 / s inside the
// compute stream's working intervals and 1 outside. Those intervals depend on when collectives end (ops wait for
// them), so the walk is repeated against the previous pass's intervals until the step time settles (a fixed point;
// kMaxCollectivePasses bounds it). With s = 1 (the catalog's) one pass is the whole walk.
constexpr int kMaxCollectivePasses = 8;

// `compute_busy`: the previous pass's compute intervals, against which collectives slow down (empty: none do).
Placement place_ops(const StepSchedule& schedule, const HardwareProfile& profile, const OpDurations& durations,
                    const std::vector<TimeInterval>& compute_busy) {
  const std::size_t count = schedule.ops.size();
  Placement placement;
  placement.start.resize(count);
  placement.end.resize(count);
  OpWalk walk(profile);
  for (std::size_t index = 0; index < count; ++index) {
    const Op& op = schedule.ops[index];
    SHARDPLAN_CHECK(op.id == static_cast<int>(index), "schedule op ids must be their positions");
    double deps_end = kNoDependency;
    for (int dep : op.deps) {
      SHARDPLAN_CHECK(dep >= 0 && dep < op.id, "dependencies must point to earlier ops (Note [Schedule order])");
      deps_end = std::max(deps_end, placement.end[static_cast<std::size_t>(dep)]);
    }
    const TimeInterval placed = walk.place(op.kind, op.stream, durations.base_s[index],
                                                durations.overlap_slowdown[index], deps_end, &compute_busy);
    placement.start[index] = placed.start_s;
    placement.end[index] = placed.end_s;
    placement.step_time_s = std::max(placement.step_time_s, placed.end_s);
  }
  placement.stream_busy = walk.stream_busy_s;
  return placement;
}

// The compute stream's working intervals of a pass, in time order (the stream runs its ops one after another).
std::vector<TimeInterval> compute_intervals(const StepSchedule& schedule, const Placement& placement) {
  std::vector<TimeInterval> busy;
  for (std::size_t index = 0; index < schedule.ops.size(); ++index) {
    const Op& op = schedule.ops[index];
    if (op.stream == StreamKind::compute && does_compute_work(op.kind) &&
        placement.end[index] > placement.start[index]) {
      busy.push_back({placement.start[index], placement.end[index]});
    }
  }
  return busy;
}

}  // namespace

SimulationResult simulate(const StepSchedule& schedule, const HardwareProfile& profile, bool record_timeline) {
  const std::size_t count = schedule.ops.size();
  SimulationResult result;
  SimulationSummary& summary = result.summary;
  summary.op_count = count;
  const OpDurations durations = op_durations(schedule, profile);  // Note [Durations by shape]
  Placement placement = place_ops(schedule, profile, durations, {});
  if (profile.overlap_collective_slowdown > 1.0) {  // Note [Collective slowdown]
    for (int pass = 1; pass < kMaxCollectivePasses; ++pass) {
      Placement next = place_ops(schedule, profile, durations, compute_intervals(schedule, placement));
      const bool settled = std::abs(next.step_time_s - placement.step_time_s) <= 1e-9 * placement.step_time_s;
      placement = std::move(next);
      if (settled) break;
    }
  }
  const std::vector<double>& start = placement.start;
  const std::vector<double>& end = placement.end;
  const std::array<double, kStreamCount>& stream_busy = placement.stream_busy;
  summary.step_time_s = placement.step_time_s;

  summary.compute_time_s = stream_busy[static_cast<std::size_t>(StreamKind::compute)];
  summary.exposed_comm_s = std::max(0.0, summary.step_time_s - summary.compute_time_s);
  for (int stream = 0; stream < kStreamCount; ++stream) {
    summary.stream_busy_s.emplace_back(to_string(static_cast<StreamKind>(stream)),
                                       stream_busy[static_cast<std::size_t>(stream)]);
  }
  constexpr std::array<OpKind, 4> kCollectiveKinds{OpKind::all_gather, OpKind::reduce_scatter, OpKind::all_reduce,
                                                   OpKind::all_to_all};
  std::array<CollectiveTotals, kCollectiveKinds.size()> totals;
  for (std::size_t index = 0; index < count; ++index) {
    const Op& op = schedule.ops[index];
    if (!is_collective(op.kind)) continue;
    CollectiveTotals& of_kind = totals[static_cast<std::size_t>(
        std::find(kCollectiveKinds.begin(), kCollectiveKinds.end(), op.kind) - kCollectiveKinds.begin())];
    ++of_kind.count;
    of_kind.bytes += op.bytes;
    of_kind.busy_s += end[index] - start[index];
  }
  for (std::size_t at = 0; at < kCollectiveKinds.size(); ++at) {
    // All-to-alls only in plans with expert parallelism.
    if (kCollectiveKinds[at] == OpKind::all_to_all && totals[at].count == 0) continue;
    totals[at].kind = to_string(kCollectiveKinds[at]);
    summary.collectives.push_back(std::move(totals[at]));
  }

  // Memory: every op's changes in time order (memory_walk.h).
  if (record_timeline) result.timeline.memory.reserve(count);
  const MemoryWalk memory =
      walk_memory(schedule, start, end, profile, record_timeline ? &result.timeline.memory : nullptr);
  summary.peak_memory_bytes = memory.peak_bytes;
  summary.memory_at_peak = memory.at_peak;
  summary.peak_op_id = memory.peak_op_id;
  summary.reserved_peak_bytes = memory.reserved_peak_bytes;
  summary.device_peak_bytes = memory.device_peak_bytes;
  if (summary.peak_op_id >= 0) {
    summary.peak_op = describe_op(schedule.ops[static_cast<std::size_t>(summary.peak_op_id)], schedule, nullptr);
  }

  summary.tokens_per_step = schedule.tokens_per_step;
  if (summary.step_time_s > 0) {
    summary.tokens_per_s = static_cast<double>(schedule.tokens_per_step) / summary.step_time_s;
    const double peak = profile.peak_flops_for_bytes(schedule.compute_element_bytes);
    summary.mfu = schedule.model_flops_per_rank / (summary.step_time_s * peak);
    summary.hfu = schedule.hardware_flops_per_rank / (summary.step_time_s * peak);
  }

  if (record_timeline) {
    result.timeline.source = "predicted";
    result.timeline.events.reserve(count);
    for (std::size_t index = 0; index < count; ++index) {
      TimelineEvent event = timeline_event(schedule.ops[index], schedule, 0);
      event.start_s = start[index];
      event.end_s = end[index];
      result.timeline.events.push_back(std::move(event));
    }
  }
  return result;
}

nlohmann::json to_json(const SimulationSummary& summary) {
  nlohmann::json memory = nlohmann::json::object();
  for (std::size_t category = 0; category < kMemoryCategoryCount; ++category) {
    memory[std::string(kMemoryCategoryNames[category]) + "_bytes"] = summary.memory_at_peak[category];
  }
  nlohmann::json streams = nlohmann::json::object();
  for (const auto& [name, busy] : summary.stream_busy_s) streams[name] = busy;
  nlohmann::json collectives = nlohmann::json::object();
  for (const auto& totals : summary.collectives) {
    collectives[totals.kind] = {{"count", totals.count}, {"bytes", totals.bytes}, {"busy_s", totals.busy_s}};
  }
  return {{"step_time_s", summary.step_time_s},
          {"compute_time_s", summary.compute_time_s},
          {"exposed_comm_s", summary.exposed_comm_s},
          {"peak_memory_bytes", summary.peak_memory_bytes},
          {"reserved_peak_bytes", summary.reserved_peak_bytes},
          {"device_peak_bytes", summary.device_peak_bytes},
          {"memory_at_peak", std::move(memory)},
          {"peak_op", summary.peak_op},
          {"tokens_per_step", summary.tokens_per_step},
          {"tokens_per_s", summary.tokens_per_s},
          {"mfu", summary.mfu},
          {"hfu", summary.hfu},
          {"streams", std::move(streams)},
          {"collectives", std::move(collectives)},
          {"op_count", summary.op_count}};
}

}  // namespace shardplan
