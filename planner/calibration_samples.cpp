// Turning a measured timeline into calibration samples, op by op, through the schedule that produced it.
#include "calibration_samples.h"

#include <algorithm>
#include <map>
#include <string>

#include "errors.h"
#include "lowering.h"
#include "op_placement.h"
#include "simulator.h"

namespace shardplan {

namespace {

// IssueGapSample: per rank, each pair of consecutive compute-stream ops whose second op had no dependency still
// running when the first ended (so the runner did not wait in the gap), with the collectives the schedule issues
// between them (the simulator charges each its issue time there, HardwareProfile::collective_issue_overhead_s).
void add_issue_gaps(const Timeline& measured, const StepSchedule& schedule, std::vector<IssueGapSample>& gaps) {
  std::map<std::pair<int, int>, const TimelineEvent*> by_rank_and_op;
  for (const TimelineEvent& event : measured.events) by_rank_and_op[{event.rank, event.op_id}] = &event;
  for (int rank : measured.ranks()) {
    std::vector<const TimelineEvent*> compute;
    for (const TimelineEvent& event : measured.events) {
      if (event.rank == rank && event.stream == "compute") compute.push_back(&event);
    }
    std::sort(compute.begin(), compute.end(),
              [](const TimelineEvent* a, const TimelineEvent* b) { return a->op_id < b->op_id; });
    for (std::size_t i = 0; i + 1 < compute.size(); ++i) {
      const TimelineEvent& before = *compute[i];
      const TimelineEvent& after = *compute[i + 1];
      const Op& op = schedule.ops[static_cast<std::size_t>(after.op_id)];
      const bool waited = std::any_of(op.deps.begin(), op.deps.end(), [&](int dep) {
        const auto found = by_rank_and_op.find({rank, dep});
        return found != by_rank_and_op.end() && found->second->end_s > before.end_s;
      });
      if (waited) continue;
      int issued = 0;
      for (int id = before.op_id + 1; id < after.op_id; ++id) {
        issued += is_collective(schedule.ops[static_cast<std::size_t>(id)].kind);
      }
      gaps.push_back({issued, std::max(0.0, after.start_s - before.end_s)});
    }
  }
}

// The ranks that run `op`'s collective together, as one number per group (the groups runner_groups.cpp creates: a
// shard group is consecutive ranks, a replica group the ranks at one position of every shard group).
int collective_group_key(const Op& op, int rank, int world_size) {
  switch (op.group) {
    case GroupKind::shard:
    case GroupKind::partial_reshard:
      return rank / std::max(1, op.group_size);
    case GroupKind::replica:
      return rank % std::max(1, world_size / std::max(1, op.group_size));
    default:
      return 0;
  }
}

// Note [Collective from the last issue]: a rank that issues a collective early measures the wait for the others as
// part of it (the end is only observed when every member has joined). The simulator models every rank alike, all
// issuing a collective at once, so what its collective cost must equal is the time from the last member's issue to
// each member's end. Measured on the CPU executor, per-unit collectives of the loop's plan A took 4-5x longer per byte
// from their own issue than plan C's whole-model all-gather, which all ranks issue together at the step's start, and
// the fit from A over-predicted C's exposed collectives by 60%.
std::map<std::pair<int, int>, double> last_issue_s(const Timeline& measured, const StepSchedule& schedule,
                                                   int world_size) {
  std::map<std::pair<int, int>, double> latest;  // (op id, group key) -> the group's latest start
  for (const TimelineEvent& event : measured.events) {
    if (event.op_id < 0 || static_cast<std::size_t>(event.op_id) >= schedule.ops.size()) continue;
    const Op& op = schedule.ops[static_cast<std::size_t>(event.op_id)];
    if (!is_collective(op.kind)) continue;
    const std::pair<int, int> key{event.op_id, collective_group_key(op, event.rank, world_size)};
    const auto found = latest.find(key);
    latest[key] = found == latest.end() ? event.start_s : std::max(found->second, event.start_s);
  }
  return latest;
}

}  // namespace

void add_calibration_samples(const Timeline& measured, const ModelSpec& model, const Plan& plan, const Cluster& cluster,
                             const HardwareProfile& base, CalibrationSamples& samples) {
  LoweringOptions options;
  options.world_size = cluster.world_size();
  options.gpus_per_node = cluster.gpus_per_node;
  const StepSchedule schedule = lower_plan(plan, model, options);
  // Each compute op's time beside communication: the union of its rank's busy communication intervals over the op
  // (Note [Communication busy time] in op_placement.h, the simulator's rule).
  std::map<int, std::vector<std::pair<double, double>>> collective_intervals;
  for (const TimelineEvent& event : measured.events) {
    if (event.stream != "compute" && event.end_s > event.start_s) {
      collective_intervals[event.rank].emplace_back(event.start_s, event.end_s);
    }
  }
  for (auto& [rank, intervals] : collective_intervals) std::sort(intervals.begin(), intervals.end());
  const auto overlap_s = [&](const TimelineEvent& op) {
    double covered = 0, reached = op.start_s;  // the union, walked in start order
    for (const auto& [start, end] : collective_intervals[op.rank]) {
      const double from = std::max(start, reached), to = std::min(end, op.end_s);
      if (to > from) covered += to - from;
      reached = std::max(reached, std::min(end, op.end_s));
    }
    return covered;
  };
  const auto group_issue_s = last_issue_s(measured, schedule, cluster.world_size());
  // Each rank's working compute intervals, for each collective's time beside compute (Note [Collective slowdown]).
  std::map<int, std::vector<std::pair<double, double>>> compute_intervals;
  for (const TimelineEvent& event : measured.events) {
    if (event.op_id < 0 || static_cast<std::size_t>(event.op_id) >= schedule.ops.size()) continue;
    const OpKind kind = schedule.ops[static_cast<std::size_t>(event.op_id)].kind;
    const bool computes = is_layer_pass(kind) || kind == OpKind::optimizer_step;
    if (computes && event.end_s > event.start_s) compute_intervals[event.rank].emplace_back(event.start_s, event.end_s);
  }
  const auto computing_s = [&](int rank, double start_s, double end_s) {
    double covered = 0;
    for (const auto& [busy_start, busy_end] : compute_intervals[rank]) {
      covered += std::max(0.0, std::min(end_s, busy_end) - std::max(start_s, busy_start));
    }
    return covered;
  };
  for (const TimelineEvent& event : measured.events) {
    if (event.op_id < 0 || static_cast<std::size_t>(event.op_id) >= schedule.ops.size()) {
      throw InputError("calibrate: the trace's op " + std::to_string(event.op_id) + " is not in the plan's schedule");
    }
    const Op& op = schedule.ops[static_cast<std::size_t>(event.op_id)];
    const double seconds = event.duration_s();
    switch (op.kind) {
      case OpKind::forward:
      case OpKind::backward:
      case OpKind::backward_input:
      case OpKind::backward_weight:
      case OpKind::recompute:
      {
        SHARDPLAN_CHECK(op.kernels != nullptr, "a compute op without kernels");
        ComputeSample sample = compute_sample(*op.kernels, seconds, base);
        sample.overlap_s = overlap_s(event);
        sample.zeroed_bytes = op.zeroed_bytes;
        samples.compute.push_back(std::move(sample));
      }
        break;
      case OpKind::optimizer_step:
        samples.memory.push_back({op.memory_bytes, seconds});
        break;
      case OpKind::all_gather:
      case OpKind::reduce_scatter:
      case OpKind::all_reduce: {
        const CollectiveKind kind = op.kind == OpKind::all_gather       ? CollectiveKind::all_gather
                                    : op.kind == OpKind::reduce_scatter ? CollectiveKind::reduce_scatter
                                                                        : CollectiveKind::all_reduce;
        auto& tier = op.group_spans_nodes ? samples.inter_node : samples.intra_node;
        const double issued_s =
            group_issue_s.at({event.op_id, collective_group_key(op, event.rank, cluster.world_size())});
        const double from_s = std::max(event.start_s, issued_s);
        if (event.end_s > from_s) {
          tier.push_back({kind, op.group_size, op.group_spans_nodes, op.bytes, event.end_s - from_s,
                          computing_s(event.rank, from_s, event.end_s)});
        }
        break;
      }
      default:
        break;
    }
  }
  add_issue_gaps(measured, schedule, samples.issue_gaps);
  // Memory: the measured peak against the schedule's peak without the overhead term (what the overhead must cover).
  long long measured_peak = 0;
  for (int rank : measured.ranks()) measured_peak = std::max(measured_peak, measured.peak_memory_bytes(rank));
  HardwareProfile without_overhead = base;
  without_overhead.context_overhead_bytes = 0;
  const auto summary = simulate(schedule, without_overhead, false).summary;
  samples.measured_peak_bytes = std::max<std::int64_t>(samples.measured_peak_bytes, measured_peak);
  samples.predicted_peak_bytes = std::max<std::int64_t>(samples.predicted_peak_bytes, summary.peak_memory_bytes);
}

}  // namespace shardplan
