// Event-driven simulation of a StepSchedule: op timing from the cost model, overlap slowdown, memory by category.
#include "simulator.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "collective_cost.h"
#include "compute_cost.h"
#include "errors.h"

namespace shardplan {
namespace {

bool is_compute(OpKind kind) {
  return kind == OpKind::forward || kind == OpKind::backward || kind == OpKind::recompute ||
         kind == OpKind::optimizer_step;
}

double base_duration_s(const Op& op, const StepSchedule& schedule, const HardwareProfile& profile) {
  switch (op.kind) {
    case OpKind::wait:
    case OpKind::free_unsharded:
      return 0.0;
    case OpKind::forward:
    case OpKind::backward:
    case OpKind::recompute:
      return compute_time_s(LayerWork{op.flops, op.memory_bytes}, schedule.compute_element_bytes, profile) +
             buffer_fill_time_s(op.zeroed_bytes, profile);
    case OpKind::optimizer_step:
      // In host memory (offload) the step streams its bytes at roughly host-link speed; on the device at HBM speed.
      return op.on_host ? host_copy_time_s(static_cast<std::int64_t>(op.memory_bytes), profile)
                        : compute_time_s(LayerWork{0.0, op.memory_bytes}, schedule.compute_element_bytes, profile);
    case OpKind::all_gather:
      return collective_cost(CollectiveKind::all_gather, op.bytes, {op.group_size, op.group_spans_nodes}, profile).time_s;
    case OpKind::reduce_scatter:
      return collective_cost(CollectiveKind::reduce_scatter, op.bytes, {op.group_size, op.group_spans_nodes}, profile)
          .time_s;
    case OpKind::all_reduce:
      return collective_cost(CollectiveKind::all_reduce, op.bytes, {op.group_size, op.group_spans_nodes}, profile).time_s;
    case OpKind::host_to_device:
    case OpKind::device_to_host:
      return host_copy_time_s(op.bytes, profile);
  }
  return 0.0;
}

struct Interval {
  double start_s;
  double end_s;
};

// Busy intervals of the communication streams, each in start order (streams run in order), with a cursor that only
// moves forward because compute ops start in non-decreasing time.
class CommOccupancy {
 public:
  void add(int stream, double start_s, double end_s) {
    if (end_s > start_s) intervals_[static_cast<std::size_t>(stream)].push_back({start_s, end_s});
  }
  // Seconds of [start, end) during which some communication stream is busy (the largest per-stream overlap; the
  // streams mostly overlap each other too, and this keeps the walk linear).
  double overlap_s(double start_s, double end_s) {
    double best = 0;
    for (std::size_t stream = 1; stream < intervals_.size(); ++stream) {
      auto& list = intervals_[stream];
      auto& cursor = cursors_[stream];
      while (cursor < list.size() && list[cursor].end_s <= start_s) ++cursor;
      double covered = 0;
      for (std::size_t i = cursor; i < list.size() && list[i].start_s < end_s; ++i) {
        covered += std::max(0.0, std::min(end_s, list[i].end_s) - std::max(start_s, list[i].start_s));
      }
      best = std::max(best, covered);
    }
    return best;
  }

 private:
  std::array<std::vector<Interval>, kStreamCount> intervals_;
  std::array<std::size_t, kStreamCount> cursors_{};
};

struct MemoryEvent {
  double time_s;
  int op_id;
  bool is_free;
};

}  // namespace

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

double slowed_end_s(double start_s, double duration_s, const std::vector<Interval>& compute_busy, double slowdown) {
  auto busy = std::upper_bound(compute_busy.begin(), compute_busy.end(), start_s,
                               [](double time_s, const Interval& interval) { return time_s < interval.end_s; });
  double now_s = start_s, remaining_s = duration_s;
  for (; busy != compute_busy.end(); ++busy) {
    if (busy->start_s > now_s) {  // idle compute until this interval: full speed
      if (remaining_s <= busy->start_s - now_s) return now_s + remaining_s;
      remaining_s -= busy->start_s - now_s;
      now_s = busy->start_s;
    }
    const double progress_s = (busy->end_s - now_s) / slowdown;
    if (remaining_s <= progress_s) return now_s + remaining_s * slowdown;
    remaining_s -= progress_s;
    now_s = busy->end_s;
  }
  return now_s + remaining_s;
}

// `compute_busy`: the previous pass's compute intervals, against which collectives slow down (empty: none do).
Placement place_ops(const StepSchedule& schedule, const HardwareProfile& profile,
                    const std::vector<Interval>& compute_busy) {
  const std::size_t count = schedule.ops.size();
  Placement placement;
  placement.start.resize(count);
  placement.end.resize(count);
  std::vector<double>& start = placement.start;
  std::vector<double>& end = placement.end;
  std::array<double, kStreamCount> stream_free{};
  std::array<double, kStreamCount>& stream_busy = placement.stream_busy;
  CommOccupancy occupancy;
  const double collective_slowdown = profile.overlap_collective_slowdown;

  for (std::size_t index = 0; index < count; ++index) {
    const Op& op = schedule.ops[index];
    SHARDPLAN_CHECK(op.id == static_cast<int>(index), "schedule op ids must be their positions");
    const int stream = static_cast<int>(op.stream);
    double ready = stream_free[static_cast<std::size_t>(stream)];
    for (int dep : op.deps) {
      SHARDPLAN_CHECK(dep >= 0 && dep < op.id, "dependencies must point to earlier ops (Note [Schedule order])");
      ready = std::max(ready, end[static_cast<std::size_t>(dep)]);
    }
    if (is_collective(op.kind) && profile.collective_issue_overhead_s > 0) {
      // HardwareProfile::collective_issue_overhead_s: the issuing thread starts the collective where the schedule
      // issues it (after the compute issued before it), then goes on; the collective runs from then.
      double& host_s = stream_free[static_cast<std::size_t>(StreamKind::compute)];
      host_s += profile.collective_issue_overhead_s;
      stream_busy[static_cast<std::size_t>(StreamKind::compute)] += profile.collective_issue_overhead_s;
      ready = std::max(ready, host_s);
    }
    double duration = base_duration_s(op, schedule, profile);
    // HardwareProfile::op_dispatch_overhead_s: the host's cost per op that does work, serialised on the compute stream.
    // Bookkeeping ops (wait, free) stay instants, so a free still precedes what the schedule issues after it.
    const bool does_work = is_compute(op.kind);
    const double dispatch_s = op.stream == StreamKind::compute && does_work ? profile.op_dispatch_overhead_s : 0.0;
    if (op.stream == StreamKind::compute && duration > 0 && is_compute(op.kind)) {
      // Note: overlap is measured against the base interval; the slowdown stretches only the overlapped part.
      const double overlapped = occupancy.overlap_s(ready, ready + duration);
      duration += (profile.overlap_compute_slowdown - 1.0) * overlapped;
    } else if (op.stream != StreamKind::compute) {
      if (is_collective(op.kind) && collective_slowdown > 1.0 && !compute_busy.empty()) {
        duration = slowed_end_s(ready, duration, compute_busy, collective_slowdown) - ready;
      }
      occupancy.add(stream, ready, ready + duration);
    }
    duration += dispatch_s;
    start[index] = ready;
    end[index] = ready + duration;
    stream_free[static_cast<std::size_t>(stream)] = end[index];
    stream_busy[static_cast<std::size_t>(stream)] += duration;
    placement.step_time_s = std::max(placement.step_time_s, end[index]);
  }
  return placement;
}

// The compute stream's working intervals of a pass, in time order (the stream runs its ops one after another).
std::vector<Interval> compute_intervals(const StepSchedule& schedule, const Placement& placement) {
  std::vector<Interval> busy;
  for (std::size_t index = 0; index < schedule.ops.size(); ++index) {
    const Op& op = schedule.ops[index];
    if (op.stream == StreamKind::compute && is_compute(op.kind) && placement.end[index] > placement.start[index]) {
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
  Placement placement = place_ops(schedule, profile, {});
  if (profile.overlap_collective_slowdown > 1.0) {  // Note [Collective slowdown]
    for (int pass = 1; pass < kMaxCollectivePasses; ++pass) {
      Placement next = place_ops(schedule, profile, compute_intervals(schedule, placement));
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
  for (OpKind kind : {OpKind::all_gather, OpKind::reduce_scatter, OpKind::all_reduce}) {
    CollectiveTotals totals;
    totals.kind = to_string(kind);
    for (std::size_t index = 0; index < count; ++index) {
      const Op& op = schedule.ops[index];
      if (op.kind != kind) continue;
      ++totals.count;
      totals.bytes += op.bytes;
      totals.busy_s += end[index] - start[index];
    }
    summary.collectives.push_back(totals);
  }

  // Memory: walk allocation and free events in time order.
  std::vector<MemoryEvent> events;
  events.reserve(2 * count);
  for (std::size_t index = 0; index < count; ++index) {
    const Op& op = schedule.ops[index];
    if (!op.allocates.empty() || !op.frees_at_start.empty()) events.push_back({start[index], op.id, false});
    if (!op.frees.empty()) events.push_back({end[index], op.id, true});
  }
  std::stable_sort(events.begin(), events.end(), [](const MemoryEvent& a, const MemoryEvent& b) {
    if (a.time_s != b.time_s) return a.time_s < b.time_s;
    return a.is_free && !b.is_free;  // at equal times frees first: the caching allocator reuses the block
  });
  MemoryByCategory current = schedule.persistent;
  long long total = 0;
  for (auto bytes : current) total += bytes;
  summary.peak_memory_bytes = total;
  summary.memory_at_peak = current;
  const auto sample = [&](double time_s) {
    if (!record_timeline) return;
    if (!result.timeline.memory.empty() && result.timeline.memory.back().time_s == time_s) {
      result.timeline.memory.back().bytes = current;
    } else {
      result.timeline.memory.push_back({time_s, 0, current});
    }
  };
  sample(0.0);
  for (const MemoryEvent& event : events) {
    const Op& op = schedule.ops[static_cast<std::size_t>(event.op_id)];
    const auto apply = [&](const std::vector<MemoryChange>& changes, int sign) {
      for (const MemoryChange& change : changes) {
        current[static_cast<std::size_t>(change.category)] += sign * change.bytes;
        total += sign * change.bytes;
      }
    };
    if (event.is_free) {
      apply(op.frees, -1);
    } else {
      apply(op.frees_at_start, -1);  // Note [Reduce-scatter input lifetime]: released before the op allocates
      apply(op.allocates, +1);
    }
    if (total > summary.peak_memory_bytes) {
      summary.peak_memory_bytes = total;
      summary.memory_at_peak = current;
      summary.peak_op_id = event.op_id;
    }
    sample(event.time_s);
  }
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
      const Op& op = schedule.ops[index];
      TimelineEvent event;
      event.op_id = op.id;
      event.name = describe_op(op, schedule, nullptr);
      event.kind = to_string(op.kind);
      event.stream = to_string(op.stream);
      event.start_s = start[index];
      event.end_s = end[index];
      event.bytes = op.bytes;
      event.flops = op.flops;
      event.unit = op.unit;
      event.layer = op.layer;
      event.micro_batch = op.micro_batch;
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
