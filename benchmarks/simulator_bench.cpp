// Google Benchmark: simulating one training step (and lowering it) for the largest preset, in ops per second.
#include <benchmark/benchmark.h>

#include "cluster.h"
#include "lowering.h"
#include "model_presets.h"
#include "simulator.h"

namespace {

using namespace shardplan;

struct Setup {
  ModelSpec model = preset_model("llama3.1-405b");
  Cluster cluster = parse_cluster("256x8xH100-80GB", HardwareCatalog::builtin());
  HardwareProfile profile = profile_from_cluster(cluster);
  Plan plan;
  LoweringOptions options;
  Setup() {
    TrainingConfig training;
    training.seq_len = 8192;
    training.checkpointing = ActivationCheckpointing::full;
    plan = default_plan(model, training, {}, wrap_per_block(model), cluster.world_size());
    options.world_size = cluster.world_size();
    options.gpus_per_node = cluster.gpus_per_node;
  }
};

// The simulator alone on a prebuilt schedule (what the planner's search repeats for each candidate's re-simulation).
void simulate_405b(benchmark::State& state) {
  const Setup setup;
  const StepSchedule schedule = lower_plan(setup.plan, setup.model, setup.options);
  for (auto _ : state) benchmark::DoNotOptimize(simulate(schedule, setup.profile, false).summary.step_time_s);
  state.counters["ops"] = static_cast<double>(schedule.ops.size());
  state.counters["ops_per_s"] = benchmark::Counter(static_cast<double>(schedule.ops.size()),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

// Lowering plus simulation: a whole `simulate` minus I/O.
void lower_and_simulate_405b(benchmark::State& state) {
  const Setup setup;
  std::size_t ops = 0;
  for (auto _ : state) {
    const StepSchedule schedule = lower_plan(setup.plan, setup.model, setup.options);
    ops = schedule.ops.size();
    benchmark::DoNotOptimize(simulate(schedule, setup.profile, false).summary.step_time_s);
  }
  state.counters["ops_per_s"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(simulate_405b)->Unit(benchmark::kMicrosecond);
BENCHMARK(lower_and_simulate_405b)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
