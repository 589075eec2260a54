// Tests of the GPU executor's stream assignment: every schedule dependency is covered by stream order plus event
// waits (checked by an independent reachability test), with no more waits than needed.
#include <doctest/doctest.h>

#include "errors.h"
#include "model_presets.h"
#include "schedule_fixtures.h"
#include "stream_assignment.h"

using namespace shardplan;
using namespace shardplan::testing;
using shardplan::gpu::assign_streams;
using shardplan::gpu::assignment_covers_dependencies;
using shardplan::gpu::GpuStream;

namespace {

StepSchedule lower_toy(StrategyKind kind, int world, int blocks, int micro_batches = 1) {
  const ModelSpec model = toy_blocks(blocks);
  Plan plan = toy_plan(model, world, kind);
  plan.grad_accumulation_steps = micro_batches;
  plan.training.global_batch = micro_batches * world;
  if (kind == StrategyKind::hybrid_shard) {
    for (auto& unit : plan.units) unit.strategy.shard_group_size = 2;
  }
  return lower_plan(plan, model, toy_options(world));
}

void check_assignment(const StepSchedule& schedule) {
  const auto assignment = assign_streams(schedule);
  std::string problem;
  CHECK_MESSAGE(assignment_covers_dependencies(schedule, assignment, &problem), problem);
  CHECK(assignment.waits <= assignment.cross_stream_dependencies);
  int total = 0;
  for (int count : assignment.ops_per_stream) total += count;
  CHECK(total == static_cast<int>(schedule.ops.size()));
  for (std::size_t i = 0; i < schedule.ops.size(); ++i) {
    const Op& op = schedule.ops[i];
    CHECK(assignment.ops[i].stream == gpu::gpu_stream_for(op.stream));
    CHECK(assignment.ops[i].launches_work == (op.kind != OpKind::wait && op.kind != OpKind::free_unsharded));
  }
}

}  // namespace

TEST_CASE("gpu streams: each schedule stream kind has its own CUDA stream, all-reduce apart from reduce-scatter") {
  CHECK(gpu::gpu_stream_for(StreamKind::compute) == GpuStream::compute);
  CHECK(gpu::gpu_stream_for(StreamKind::all_gather) == GpuStream::all_gather);
  CHECK(gpu::gpu_stream_for(StreamKind::reduce_scatter) == GpuStream::reduce_scatter);
  CHECK(gpu::gpu_stream_for(StreamKind::all_reduce) == GpuStream::all_reduce);
  CHECK(gpu::gpu_stream_for(StreamKind::host_to_device) == GpuStream::host_to_device);
  CHECK(gpu::gpu_stream_for(StreamKind::device_to_host) == GpuStream::device_to_host);
}

TEST_CASE("gpu streams: every dependency is covered for every strategy, accumulation and world size") {
  for (StrategyKind kind : {StrategyKind::full_shard, StrategyKind::shard_grad_op, StrategyKind::no_shard,
                            StrategyKind::hybrid_shard}) {
    for (int micro_batches : {1, 3}) {
      CAPTURE(static_cast<int>(kind));
      CAPTURE(micro_batches);
      const StepSchedule schedule = lower_toy(kind, 4, 5, micro_batches);
      check_assignment(schedule);
      // HSDP's all-reduces across replicas (and no_shard's over the world) run on their own stream (Note [GPU streams]).
      CHECK(assign_streams(schedule).ops_per_stream[static_cast<int>(GpuStream::all_reduce)] ==
            static_cast<int>(schedule.count(OpKind::all_reduce)));
    }
  }
  SUBCASE("CPU offload of parameters adds the copy streams") {
    const ModelSpec model = toy_blocks(4);
    Plan plan = toy_plan(model, 2);
    plan.offload.params = true;
    const StepSchedule schedule = lower_plan(plan, model, toy_options(2));
    check_assignment(schedule);
    const auto assignment = assign_streams(schedule);
    CHECK(assignment.ops_per_stream[static_cast<int>(GpuStream::host_to_device)] > 0);
    CHECK(assignment.ops_per_stream[static_cast<int>(GpuStream::device_to_host)] > 0);
  }
}

TEST_CASE("gpu streams: a real model's schedule (llama2-7b, 8 ranks, full shard) is covered") {
  const ModelSpec model = preset_model("llama2-7b");
  TrainingConfig training;
  training.seq_len = 1024;
  training.precision = precision_recipe("bf16-mixed");
  training.global_batch = 16;
  ShardingStrategy strategy;
  const Plan plan = default_plan(model, training, strategy, wrap_per_block(model), 8);
  LoweringOptions options;
  options.world_size = 8;
  options.gpus_per_node = 8;
  const StepSchedule schedule = lower_plan(plan, model, options);
  check_assignment(schedule);
  const auto assignment = assign_streams(schedule);
  // Each unit's gathered parameters reach compute through a wait op, so there is at least one wait per all-gather
  // consumed, and each reduce-scatter waits for the backward that produced its gradient.
  CHECK(assignment.waits >= static_cast<int>(schedule.count(OpKind::all_gather)));
  CHECK(assignment.ops_per_stream[static_cast<int>(GpuStream::all_gather)] ==
        static_cast<int>(schedule.count(OpKind::all_gather)));
}

TEST_CASE("gpu streams: hand-built schedule — redundant waits are dropped, needed ones kept") {
  // compute: c0 c1 c2 ; all_gather: g0 g1.  g0 ← c0; c1 ← g0; g1 ← c1; c2 ← g1 and c2 ← g0 (g0 is implied by g1).
  StepSchedule schedule;
  auto add = [&](OpKind kind, StreamKind stream, std::vector<int> deps) {
    Op op;
    op.id = static_cast<int>(schedule.ops.size());
    op.kind = kind;
    op.stream = stream;
    op.deps = std::move(deps);
    schedule.ops.push_back(op);
  };
  add(OpKind::forward, StreamKind::compute, {});          // 0
  add(OpKind::all_gather, StreamKind::all_gather, {0});   // 1
  add(OpKind::forward, StreamKind::compute, {1});         // 2
  add(OpKind::all_gather, StreamKind::all_gather, {2});   // 3
  add(OpKind::forward, StreamKind::compute, {1, 3, 0});   // 4
  const auto assignment = assign_streams(schedule);
  CHECK(assignment.cross_stream_dependencies == 5);  // 1←0, 2←1, 3←2, 4←1, 4←3 (4←0 is on its own stream)
  CHECK(assignment.waits == 4);  // op 4 waits for op 3 only: op 1 is earlier on op 3's stream
  CHECK(assignment.ops[4].wait_events.size() == 1);
  CHECK(assignment.ops[4].wait_events[0] == assignment.ops[3].record_event);
  CHECK(assignment.ops[0].record_event >= 0);
  CHECK(assignment.ops[2].record_event >= 0);
  CHECK(assignment.ops[4].record_event == -1);  // nobody waits on it
  CHECK(assignment_covers_dependencies(schedule, assignment));

  SUBCASE("an assignment missing a wait is caught by the independent check") {
    auto broken = assignment;
    broken.ops[4].wait_events.clear();
    std::string problem;
    CHECK_FALSE(assignment_covers_dependencies(schedule, broken, &problem));
    CHECK(problem.find("op 4") != std::string::npos);
  }
  SUBCASE("a dependency on a later op is an internal error") {
    schedule.ops[2].deps = {3};
    CHECK_THROWS_AS(assign_streams(schedule), InternalError);
  }
}
