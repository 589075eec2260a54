// Tests of Note [Reduce-scatter waits] (planner/lowering.cpp): under FSDP2 the compute stream waits for the previous
// reduce-scatter at each post-backward and for the pass's last one at its end; under FSDP1 it waits for neither.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "lowering.h"
#include "schedule_fixtures.h"
#include "simulator.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

// 4 toy blocks, one unit each, full_shard over 2 ranks, 2 micro-batches per step (no no_sync: every micro-batch's
// backward reduces), under FSDP `fsdp_version`'s front end, lowered.
StepSchedule two_micro_batches(int fsdp_version) {
  ModelSpec model = toy_blocks(4);
  Plan plan = toy_plan(model, 2);
  plan.grad_accumulation_steps = 2;
  plan.training.finetune.fsdp.version = fsdp_version;
  model.finetune = plan.training.finetune;  // the front end's model (finetuned_model resolves it so)
  return lower_plan(plan, model, toy_options(2));
}

// The compute-stream waits that depend on a reduce-scatter: (wait op id, reduce-scatter op id).
std::vector<std::pair<int, int>> reduce_scatter_waits(const StepSchedule& schedule) {
  std::vector<std::pair<int, int>> waits;
  for (const Op& op : schedule.ops) {
    if (op.kind != OpKind::wait || op.stream != StreamKind::compute) continue;
    for (int dep : op.deps) {
      if (schedule.ops[static_cast<std::size_t>(dep)].kind == OpKind::reduce_scatter) waits.emplace_back(op.id, dep);
    }
  }
  return waits;
}

}  // namespace

TEST_CASE("FSDP2's compute stream waits for the previous reduce-scatter, and for the pass's last at its end") {
  const StepSchedule schedule = two_micro_batches(2);
  std::vector<int> scatters;
  for (const Op& op : schedule.ops) {
    if (op.kind == OpKind::reduce_scatter) scatters.push_back(op.id);
  }
  REQUIRE(scatters.size() == 8);  // per micro-batch, the 4 blocks' units (the root holds no parameters)
  // Every reduce-scatter is waited for exactly once, in order.
  const auto waits = reduce_scatter_waits(schedule);
  REQUIRE(waits.size() == scatters.size());
  for (std::size_t index = 0; index < scatters.size(); ++index) {
    CAPTURE(index);
    const auto [wait, scatter] = waits[index];
    CHECK(scatter == scatters[index]);
    CHECK(wait > scatter);
    const int micro = schedule.ops[static_cast<std::size_t>(scatter)].micro_batch;
    const bool last_of_pass =
        index + 1 == scatters.size() || schedule.ops[static_cast<std::size_t>(scatters[index + 1])].micro_batch != micro;
    if (!last_of_pass) {
      // At the next unit's post-backward: before its reduce-scatter is issued.
      CHECK(wait < scatters[index + 1]);
      continue;
    }
    // The pass's last: before any compute of the next micro-batch and before the optimizer step.
    for (const Op& op : schedule.ops) {
      if (op.stream == StreamKind::compute && (op.micro_batch > micro || op.kind == OpKind::optimizer_step)) {
        CHECK(op.id > wait);
      }
    }
  }
  // FSDP1 reduces on its post-backward stream and keeps the buffers by record_stream: no wait.
  CHECK(reduce_scatter_waits(two_micro_batches(1)).empty());
}

TEST_CASE("FSDP2's reduce-scatter waits: a slow reduce-scatter holds back the compute after it") {
  // Links 100× slower than round_profile's: a unit's reduce-scatter (4,000 bytes over 2 ranks, 0.2 s) outlasts a
  // block's backward (8 ms), so the reduce-scatters queue up behind the backward.
  HardwareProfile profile = round_profile();
  profile.intra_node = {"link", 0.0, 1e4, 1.0};
  profile.inter_node = {"fabric", 0.0, 1e4, 1.0};
  const StepSchedule fsdp2 = two_micro_batches(2), fsdp1 = two_micro_batches(1);
  const SimulationResult waited = simulate(fsdp2, profile), free_running = simulate(fsdp1, profile);
  MESSAGE("step " << waited.summary.step_time_s << " s under FSDP2, " << free_running.summary.step_time_s
                  << " s under FSDP1");
  CHECK(waited.summary.step_time_s > free_running.summary.step_time_s);
  const auto times_of = [](const SimulationResult& result, std::size_t ops) {
    std::vector<std::pair<double, double>> times(ops, {0.0, 0.0});  // per op id: start, end
    for (const TimelineEvent& event : result.timeline.events) {
      times.at(static_cast<std::size_t>(event.op_id)) = {event.start_s, event.end_s};
    }
    return times;
  };
  // FSDP2: every compute op issued after a wait starts once the reduce-scatter it waited for has ended.
  const auto times2 = times_of(waited, fsdp2.ops.size());
  const auto waits = reduce_scatter_waits(fsdp2);
  REQUIRE(!waits.empty());
  for (const auto& [wait, scatter] : waits) {
    for (const Op& op : fsdp2.ops) {
      if (op.id > wait && op.stream == StreamKind::compute) {
        CHECK(times2[static_cast<std::size_t>(op.id)].first >= times2[static_cast<std::size_t>(scatter)].second);
      }
    }
  }
  // FSDP1: the backward runs ahead of the queued reduce-scatters — some backward op starts before a reduce-scatter
  // issued earlier has ended.
  const auto times1 = times_of(free_running, fsdp1.ops.size());
  bool ran_ahead = false;
  for (const Op& scatter : fsdp1.ops) {
    if (scatter.kind != OpKind::reduce_scatter) continue;
    for (const Op& op : fsdp1.ops) {
      if (op.id > scatter.id && op.kind == OpKind::backward &&
          times1[static_cast<std::size_t>(op.id)].first < times1[static_cast<std::size_t>(scatter.id)].second) {
        ran_ahead = true;
      }
    }
  }
  CHECK(ran_ahead);
}
