// Google Benchmark: the full joint plan search for the largest preset, and a capacity sweep of 3 GPU types × 8…4096.
#include <benchmark/benchmark.h>

#include "capacity.h"
#include "cluster.h"
#include "model_presets.h"
#include "search.h"

namespace {

using namespace shardplan;

// `shardplan plan --model llama3.1-405b --cluster 256x8xH100-80GB` (target: under 1 s on the 2-core reference).
void plan_405b_on_2048_h100(benchmark::State& state) {
  const ModelSpec model = preset_model("llama3.1-405b");
  const Cluster cluster = parse_cluster("256x8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 8192;
  std::size_t candidates = 0;
  for (auto _ : state) {
    const SearchResult result = search_plans(model, cluster, profile, training, SearchOptions{});
    candidates = result.candidates_evaluated;
    benchmark::DoNotOptimize(result.best.summary.step_time_s);
  }
  state.counters["candidates"] = static_cast<double>(candidates);
}

// `shardplan capacity --model llama3-70b --gpus A100-80GB,H100-80GB,H200-141GB --min-gpus 8 --max-gpus 4096
// --tensor-parallel 1`
// (target: under 10 s).
void capacity_llama3_70b_3_types(benchmark::State& state) {
  const ModelSpec model = preset_model("llama3-70b");
  TrainingConfig training;
  training.seq_len = 8192;
  CapacityOptions options;
  options.gpus = {"A100-80GB", "H100-80GB", "H200-141GB"};
  options.min_gpus = 8;
  options.max_gpus = 4096;
  options.pins.tensor_parallel = 1;  // FSDP alone, as this benchmark has always measured
  std::size_t points = 0;
  for (auto _ : state) {
    const CapacityResult result = capacity_sweep(model, HardwareCatalog::builtin(), training, options);
    points = result.points.size();
    benchmark::DoNotOptimize(result.points.front().step_time_s);
  }
  state.counters["configurations"] = static_cast<double>(points);
}

BENCHMARK(plan_405b_on_2048_h100)->Unit(benchmark::kMillisecond);
BENCHMARK(capacity_llama3_70b_3_types)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
