// Google Benchmark: simulating one training step (and lowering it) for the largest preset, and placing its fragments
// as the plan search does, in ops per second.
#include <benchmark/benchmark.h>

#include "cluster.h"
#include "fragment.h"
#include "lowering.h"
#include "memory_certainty.h"
#include "model_presets.h"
#include "op_durations.h"
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

// The search's timing of a step (Note [Fragments] in schedule.h): every fragment of the step placed from the state the
// one before it left, each op priced beforehand (as FragmentCache does once per window).
void place_fragments_405b(benchmark::State& state) {
  const Setup setup;
  const StepSchedule schedule = lower_plan(setup.plan, setup.model, setup.options);
  const OpDurations durations = op_durations(schedule, setup.profile);
  const MemoryCertainty certainty(schedule);
  std::vector<Fragment> fragments;
  std::size_t ops = 0;
  for (std::size_t mark = 0; mark < schedule.fragments.size(); ++mark) {
    const int end = mark + 1 < schedule.fragments.size() ? schedule.fragments[mark + 1].first_op
                                                          : static_cast<int>(schedule.ops.size());
    fragments.push_back(extract_fragment(schedule, schedule.fragments[mark].first_op, end, durations, certainty));
    ops += fragments.back().ops.size();
  }
  FragmentPlacer placer(setup.profile);
  for (auto _ : state) {
    BoundaryState boundary;
    double step_s = 0;
    for (const Fragment& fragment : fragments) {
      FragmentTiming timing = placer.place(fragment, boundary);
      step_s += timing.duration_s;
      boundary = std::move(timing.end);
    }
    benchmark::DoNotOptimize(step_s);
  }
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["ops_per_s"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(simulate_405b)->Unit(benchmark::kMicrosecond);
BENCHMARK(place_fragments_405b)->Unit(benchmark::kMicrosecond);
BENCHMARK(lower_and_simulate_405b)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
