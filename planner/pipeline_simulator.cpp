// simulate_pipeline: all pipeline programs placed together (Note [Pipeline placement] in pipeline_simulator.h).
#include "pipeline_simulator.h"

#include <algorithm>

#include "errors.h"
#include "memory_walk.h"
#include "op_durations.h"
#include "op_placement.h"
#include "simulator.h"

namespace shardplan {
namespace {

// One program's placed ops and memory samples into the pipeline's timeline, as rank `rank`.
void record_program(const StepSchedule& schedule, const std::vector<double>& start_s, const std::vector<double>& end_s,
                    int rank, std::vector<MemorySample>& samples, Timeline& timeline) {
  timeline.source = "predicted";
  for (std::size_t index = 0; index < schedule.ops.size(); ++index) {
    TimelineEvent event = timeline_event(schedule.ops[index], schedule, rank);
    event.start_s = start_s[index];
    event.end_s = end_s[index];
    timeline.events.push_back(std::move(event));
  }
  for (MemorySample& sample : samples) {
    sample.rank = rank;
    timeline.memory.push_back(sample);
  }
}

}  // namespace

PipelineSimulation simulate_pipeline(const PipelineSchedule& pipeline, const HardwareProfile& profile,
                                     bool record_timeline) {
  const std::size_t programs = pipeline.programs.size();
  struct ProgramWalk {
    OpDurations durations;
    std::vector<double> start_s, end_s;
    std::vector<int> waits_on_program, waits_on_op;  // per op: its cross dependency (-1: none)
    std::size_t next = 0;
  };
  std::vector<ProgramWalk> walks(programs);
  std::vector<OpWalk> clocks(programs, OpWalk(profile));
  for (std::size_t program = 0; program < programs; ++program) {
    const StepSchedule& schedule = pipeline.programs[program];
    ProgramWalk& walk = walks[program];
    walk.durations = op_durations(schedule, profile);  // Note [Durations by shape]
    walk.start_s.assign(schedule.ops.size(), 0.0);
    walk.end_s.assign(schedule.ops.size(), 0.0);
    walk.waits_on_program.assign(schedule.ops.size(), -1);
    walk.waits_on_op.assign(schedule.ops.size(), -1);
  }
  for (const PipelineSchedule::CrossDependency& dependency : pipeline.cross_dependencies) {
    ProgramWalk& walk = walks[static_cast<std::size_t>(dependency.program)];
    walk.waits_on_program[static_cast<std::size_t>(dependency.op)] = dependency.on_program;
    walk.waits_on_op[static_cast<std::size_t>(dependency.op)] = dependency.on_op;
  }

  PipelineSimulation result;
  std::size_t remaining = 0;
  for (const StepSchedule& schedule : pipeline.programs) remaining += schedule.ops.size();
  while (remaining > 0) {
    bool placed_any = false;
    for (std::size_t program = 0; program < programs; ++program) {
      const StepSchedule& schedule = pipeline.programs[program];
      ProgramWalk& walk = walks[program];
      for (; walk.next < schedule.ops.size(); ++walk.next) {
        const std::size_t index = walk.next;
        const Op& op = schedule.ops[index];
        double deps_end = kNoDependency;
        if (const int on = walk.waits_on_program[index]; on >= 0) {
          const ProgramWalk& other = walks[static_cast<std::size_t>(on)];
          const auto on_op = static_cast<std::size_t>(walk.waits_on_op[index]);
          if (on_op >= other.next) break;  // its send is not placed yet: on to the other programs
          deps_end = other.end_s[on_op];
        }
        for (int dep : op.deps) deps_end = std::max(deps_end, walk.end_s[static_cast<std::size_t>(dep)]);
        const TimeInterval placed = clocks[program].place(op.kind, op.stream, walk.durations.base_s[index],
                                                            walk.durations.overlap_slowdown[index], deps_end, nullptr);
        walk.start_s[index] = placed.start_s;
        walk.end_s[index] = placed.end_s;
        result.step_time_s = std::max(result.step_time_s, placed.end_s);
        placed_any = true;
        --remaining;
      }
    }
    SHARDPLAN_CHECK(placed_any || remaining == 0, "the pipeline programs wait on each other (a deadlock in the order)");
  }

  double peak_flops_time = 0;
  double model_flops = 0;
  for (std::size_t program = 0; program < programs; ++program) {
    const StepSchedule& schedule = pipeline.programs[program];
    const ProgramWalk& walk = walks[program];
    PipelineRankSummary rank;
    rank.rank = static_cast<int>(program);
    for (int stage = rank.rank; stage < pipeline.order.stage_count(); stage += pipeline.order.ranks) {
      rank.stages.push_back(stage);
    }
    rank.compute_busy_s = clocks[program].stream_busy_s[static_cast<std::size_t>(StreamKind::compute)];
    rank.p2p_busy_s = clocks[program].stream_busy_s[static_cast<std::size_t>(StreamKind::p2p)];
    rank.bubble_fraction = result.step_time_s > 0 ? 1.0 - rank.compute_busy_s / result.step_time_s : 0.0;
    std::vector<MemorySample> samples;
    const MemoryWalk memory =
        walk_memory(schedule, walk.start_s, walk.end_s, profile, record_timeline ? &samples : nullptr);
    if (record_timeline) record_program(schedule, walk.start_s, walk.end_s, rank.rank, samples, result.timeline);
    rank.peak_memory_bytes = memory.peak_bytes;
    rank.device_peak_bytes = memory.device_peak_bytes;
    rank.memory_at_peak = memory.at_peak;
    // Micro-batches in flight on the rank, over all its stages: a stage's forward of a micro-batch begins one, its
    // backward (or, split, its weight part: Note [Split backward lowering]) ends it; in program order (the compute
    // stream runs them in that order).
    int count = 0;
    std::vector<std::vector<bool>> forwarded(static_cast<std::size_t>(pipeline.order.stage_count()));
    for (const Op& op : schedule.ops) {
      const bool ends = op.kind == OpKind::backward || op.kind == OpKind::backward_weight;
      if (op.stage < 0 || (op.kind != OpKind::forward && !ends)) continue;
      auto& seen = forwarded[static_cast<std::size_t>(op.stage)];
      if (seen.size() <= static_cast<std::size_t>(op.micro_batch)) {
        seen.resize(static_cast<std::size_t>(op.micro_batch) + 1);
      }
      if (op.kind == OpKind::forward && !seen[static_cast<std::size_t>(op.micro_batch)]) {
        seen[static_cast<std::size_t>(op.micro_batch)] = true;
        ++count;
        rank.peak_in_flight_micro_batches = std::max(rank.peak_in_flight_micro_batches, count);
      } else if (ends && seen[static_cast<std::size_t>(op.micro_batch)]) {
        seen[static_cast<std::size_t>(op.micro_batch)] = false;
        --count;
      }
    }
    result.bubble_fraction += rank.bubble_fraction / static_cast<double>(programs);
    model_flops += schedule.model_flops_per_rank;
    peak_flops_time += profile.peak_flops_for_bytes(schedule.compute_element_bytes);
    result.ranks.push_back(std::move(rank));
  }
  if (!pipeline.programs.empty()) result.tokens_per_step = pipeline.programs.front().tokens_per_step;
  if (result.step_time_s > 0) {
    result.tokens_per_s = static_cast<double>(result.tokens_per_step) / result.step_time_s;
    result.mfu = peak_flops_time > 0 ? model_flops / (result.step_time_s * peak_flops_time) : 0.0;
  }
  return result;
}

}  // namespace shardplan
