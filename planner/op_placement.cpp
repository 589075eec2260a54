// The simulator's per-op rules: base durations from the cost model, communication busy time, and one op's placement.
#include "op_placement.h"

#include <algorithm>

#include "collective_cost.h"
#include "compute_cost.h"
#include "host_optimizer.h"
#include "overlap_slowdown.h"
#include "point_to_point.h"

namespace shardplan {

bool does_compute_work(OpKind kind) {
  return is_layer_pass(kind) || kind == OpKind::optimizer_step;
}

double base_duration_s(const Op& op, int compute_element_bytes, const HardwareProfile& profile) {
  const GroupPlacement group{op.group_size, op.group_spans_nodes, op.group_ranks_per_node};
  switch (op.kind) {
    case OpKind::wait:
    case OpKind::free_unsharded:
    case OpKind::recv:
      return 0.0;
    case OpKind::send:
      return point_to_point_time_s(op.bytes, op.group_spans_nodes, profile);
    case OpKind::forward:
    case OpKind::backward:
    case OpKind::backward_input:
    case OpKind::backward_weight:
    case OpKind::recompute:
      return layer_pass_duration_s(op.kernels ? pass_time_s(*op.kernels, compute_element_bytes, profile) : 0.0,
                                   op.zeroed_bytes, profile);
    case OpKind::optimizer_step:
      // In host memory (offload) at the node's DRAM bandwidth, shared by its ranks (Note [CPU optimizer step]); on
      // the device at HBM speed.
      return op.on_host ? host_optimizer_step_time_s(op.memory_bytes, profile) : memory_time_s(op.memory_bytes, profile);
    case OpKind::all_gather:
      return collective_cost(CollectiveKind::all_gather, op.bytes, group, profile).time_s;
    case OpKind::reduce_scatter:
      return collective_cost(CollectiveKind::reduce_scatter, op.bytes, group, profile).time_s;
    case OpKind::all_reduce:
      return collective_cost(CollectiveKind::all_reduce, op.bytes, group, profile).time_s;
    case OpKind::all_to_all:
      return collective_cost(CollectiveKind::all_to_all, op.bytes, group, profile).time_s;
    case OpKind::host_to_device:
    case OpKind::device_to_host:
      return host_copy_time_s(op.bytes, profile);
  }
  return 0.0;
}

double layer_pass_duration_s(double kernels_s, std::int64_t zeroed_bytes, const HardwareProfile& profile) {
  return kernels_s + buffer_fill_time_s(zeroed_bytes, profile);
}

double overlap_slowdown(const Op& op, int compute_element_bytes, const HardwareProfile& profile) {
  // The optimizer step on the device is memory-bound work beside the collectives' kernels; on the host (CPU offload,
  // Note [CPU optimizer step] in host_optimizer.h) it runs on the CPU cores over host DRAM, where the GPU's kernels
  // beside a collective (the contention nccl#1428 measured, Note [Overlap slowdown by kernel kind]) do not reach it.
  if (op.kind == OpKind::optimizer_step) return op.on_host ? 1.0 : profile.overlap_memory_slowdown;
  if (!is_layer_pass(op.kind)) return 1.0;
  const PassTime time = op.kernels ? pass_time(*op.kernels, compute_element_bytes, profile) : PassTime{};
  return pass_overlap_slowdown(time, buffer_fill_time_s(op.zeroed_bytes, profile), profile);
}

void CommBusy::add(double start_s, double end_s) {
  if (!(end_s > start_s)) return;
  // Insert in start order, then merge with the neighbours it touches (the union is what stretches compute).
  std::size_t at = intervals_.size();
  while (at > first_ && intervals_[at - 1].start_s > start_s) --at;
  intervals_.insert(at, {start_s, end_s});
  if (at > first_ && intervals_[at - 1].end_s >= start_s) {
    intervals_[at - 1].end_s = std::max(intervals_[at - 1].end_s, end_s);
    intervals_.erase(at);
    --at;
  }
  while (at + 1 < intervals_.size() && intervals_[at + 1].start_s <= intervals_[at].end_s) {
    intervals_[at].end_s = std::max(intervals_[at].end_s, intervals_[at + 1].end_s);
    intervals_.erase(at + 1);
  }
}

double CommBusy::overlap_s(double start_s, double end_s) {
  while (first_ < intervals_.size() && intervals_[first_].end_s <= start_s) ++first_;
  double covered = 0;
  for (std::size_t i = first_; i < intervals_.size() && intervals_[i].start_s < end_s; ++i) {
    covered += std::min(end_s, intervals_[i].end_s) - std::max(start_s, intervals_[i].start_s);
  }
  return covered;
}

IntervalList CommBusy::after(double after_s) const {
  IntervalList rest;
  for (std::size_t i = first_; i < intervals_.size(); ++i) {
    if (intervals_[i].end_s <= after_s) continue;
    rest.push_back({std::max(intervals_[i].start_s, after_s) - after_s, intervals_[i].end_s - after_s});
  }
  return rest;
}

namespace {

// Note [Collective slowdown] (simulator.cpp): the end of a collective that needs `duration_s` of progress from
// `start_s`, progressing at rate 1 / `slowdown` inside the compute stream's working intervals and at 1 outside.
double slowed_end_s(double start_s, double duration_s, const std::vector<TimeInterval>& compute_busy, double slowdown) {
  auto busy = std::upper_bound(compute_busy.begin(), compute_busy.end(), start_s,
                               [](double time_s, const TimeInterval& interval) { return time_s < interval.end_s; });
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

}  // namespace

TimeInterval OpWalk::place(OpKind kind, StreamKind stream, double base_s, double slowdown, double deps_end_s,
                           const std::vector<TimeInterval>* compute_busy, const TimingRelaxation& relaxation) {
  const auto on = static_cast<std::size_t>(stream);
  constexpr auto host = static_cast<std::size_t>(StreamKind::compute);
  double ready = std::max(stream_free_s[on], deps_end_s);
  const double issue_s = relaxation.free_collective_issue ? 0.0 : profile_.collective_issue_overhead_s;
  if (is_collective(kind) && issue_s > 0) {
    // HardwareProfile::collective_issue_overhead_s: the issuing thread starts the collective where the schedule
    // issues it (after the compute issued before it), then goes on; the collective runs from then.
    stream_free_s[host] += issue_s;
    stream_busy_s[host] += issue_s;
  }
  // Communication and copies start once the host has issued them, where the schedule does (Note [Fragments]: so no
  // op starts before the host reached it).
  if (stream != StreamKind::compute) ready = std::max(ready, stream_free_s[host]);
  double duration = base_s;
  // HardwareProfile::op_dispatch_overhead_s: the host's cost per op that does work, serialised on the compute stream.
  // Bookkeeping ops (wait, free) stay instants, so a free still precedes what the schedule issues after it.
  const bool works = stream == StreamKind::compute && does_compute_work(kind);
  if (works && duration > 0) {
    // Note [Communication busy time]: measured against the base interval; the slowdown stretches the overlapped part.
    duration += (slowdown - 1.0) * comm_busy.overlap_s(ready, ready + duration);
  } else if (stream != StreamKind::compute) {
    if (is_collective(kind) && profile_.overlap_collective_slowdown > 1.0 && compute_busy != nullptr &&
        !compute_busy->empty()) {
      duration = slowed_end_s(ready, duration, *compute_busy, profile_.overlap_collective_slowdown) - ready;
    }
    comm_busy.add(ready, ready + duration);
  }
  if (works) duration += profile_.op_dispatch_overhead_s;
  stream_free_s[on] = ready + duration;
  stream_busy_s[on] += duration;
  return {ready, ready + duration};
}

}  // namespace shardplan
