// Google Benchmark: cost of one per-rank memory estimate (what the planner's search calls in its inner loop).
#include <benchmark/benchmark.h>

#include "cluster.h"
#include "memory_model.h"
#include "model_presets.h"

namespace {

void estimate_preset(benchmark::State& state, const char* model_name) {
  using namespace shardplan;
  const ModelSpec model = preset_model(model_name);
  const Cluster cluster = parse_cluster("16x8xH100-80GB", HardwareCatalog::builtin());
  TrainingConfig training;
  training.seq_len = model.default_seq_len;
  const MemoryQuery query =
      memory_query_for(model, cluster, wrap_per_block(model), ShardingStrategy{}, training);
  for (auto _ : state) benchmark::DoNotOptimize(estimate_memory(query).breakdown.total_bytes());
  state.counters["layers"] = static_cast<double>(model.layers.size());
}

BENCHMARK_CAPTURE(estimate_preset, llama3_8b, "llama3-8b");
BENCHMARK_CAPTURE(estimate_preset, llama3_1_405b, "llama3.1-405b");

}  // namespace

BENCHMARK_MAIN();
