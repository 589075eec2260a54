// The runner's measurements: tracked memory against the schedule, collective counts per step, the measured Timeline.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "errors.h"
#include "mpi_communicator.h"
#include "runner.h"
#include "runner_fixtures.h"

namespace shardplan::runner::testing {

namespace {

struct Measured {
  StepSchedule schedule;
  StepReport report;
};

Measured one_step(const std::string& strategy, ActivationCheckpointing ac = ActivationCheckpointing::none) {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec model = small_llama();
  const Plan plan = strategy_plan(model, fp32_training(16, 2, 0, ac), strategy, world.size());
  Runner runner(model, plan, world);
  const auto data = test_data(2, 16);
  runner.step(rank_micro_batches(data, 0, 1, world.size(), world.rank()));  // warm-up step
  Measured measured{runner.schedule(), runner.step(rank_micro_batches(data, 1, 1, world.size(), world.rank()))};
  return measured;
}

void check_memory(const std::string& strategy) {
  const Measured m = one_step(strategy);
  const MemoryByCategory predicted = predicted_peaks(m.schedule);
  for (MemoryCategory category : {MemoryCategory::sharded_params, MemoryCategory::sharded_grads,
                                  MemoryCategory::optimizer_states, MemoryCategory::unsharded_params,
                                  MemoryCategory::root_unit, MemoryCategory::comm_buffers}) {
    const auto index = static_cast<std::size_t>(category);
    INFO(strategy, ": ", to_string(category));
    CHECK(m.report.peak_by_category[index] == predicted[index]);
  }
  const auto activations = static_cast<std::size_t>(MemoryCategory::activations);
  const double ratio = static_cast<double>(m.report.peak_by_category[activations]) /
                       static_cast<double>(predicted[activations]);
  MESSAGE(strategy, ": tracked activation peak ", m.report.peak_by_category[activations], " B, predicted ",
          predicted[activations], " B (ratio ", ratio, ")");
  CHECK(m.report.peak_by_category[activations] > 0);
  // Issue: tracked activations within 2% of the schedule's prediction.
  CHECK(ratio == doctest::Approx(1.0).epsilon(0.02));
}

}  // namespace

TEST_CASE("runner: tracked model-state memory equals the schedule's bytes") {
  check_memory("full_shard");
  check_memory("shard_grad_op");
  check_memory("no_shard");
}

TEST_CASE("runner: collectives per step equal the schedule's") {
  for (const std::string strategy : {"full_shard", "shard_grad_op", "no_shard"}) {
    const Measured m = one_step(strategy);
    const comm::CommCounters expected = Runner::expected_collectives(m.schedule);
    for (comm::Collective kind : {comm::Collective::all_gather, comm::Collective::reduce_scatter,
                                  comm::Collective::all_reduce, comm::Collective::broadcast, comm::Collective::barrier}) {
      INFO(strategy, ": ", comm::to_string(kind));
      CHECK(m.report.collectives.calls(kind) == expected.calls(kind));
      CHECK(m.report.collectives.bytes(kind) == expected.bytes(kind));
    }
  }
}

TEST_CASE("runner: the measured timeline has one event per op on the simulator's streams") {
  const Measured m = one_step("full_shard", ActivationCheckpointing::full);
  const Timeline& timeline = m.report.timeline;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CHECK(timeline.source == "measured");
  REQUIRE(timeline.events.size() == m.schedule.ops.size());
  for (std::size_t i = 0; i < timeline.events.size(); ++i) {
    const TimelineEvent& event = timeline.events[i];
    const Op& op = m.schedule.ops[i];
    CHECK(event.op_id == op.id);
    CHECK(event.stream == to_string(op.stream));
    CHECK(event.kind == to_string(op.kind));
    CHECK(event.rank == rank);
    CHECK(event.start_s >= 0);
    CHECK(event.end_s >= event.start_s);
    CHECK(event.end_s <= m.report.step_time_s + 1e-3);
  }
  REQUIRE(!timeline.memory.empty());
  CHECK(timeline.memory.front().time_s >= 0);
  long long peak = 0;
  for (const auto& sample : timeline.memory) peak = std::max(peak, sample.total_bytes());
  CHECK(peak == m.report.peak_bytes);
}

TEST_CASE("runner: an unsupported plan is an InputError naming the reason") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec model = small_llama();
  TrainingConfig training = fp32_training(16, 2);
  training.precision = precision_recipe("bf16-mixed");
  const Plan plan = strategy_plan(model, training, "full_shard", world.size());
  CHECK_THROWS_AS(Runner(model, plan, world), InputError);
}

}  // namespace shardplan::runner::testing
