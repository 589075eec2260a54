// Google Benchmark: cost of one closed-form memory bound of a plan (what a search can prune with in its inner loop).
#include <benchmark/benchmark.h>

#include "cluster.h"
#include "memory_bound.h"
#include "model_presets.h"

namespace {

void bound_preset(benchmark::State& state, const char* model_name) {
  using namespace shardplan;
  const ModelSpec model = preset_model(model_name);
  const Cluster cluster = parse_cluster("16x8xH100-80GB", HardwareCatalog::builtin());
  TrainingConfig training;
  training.seq_len = model.default_seq_len;
  const Plan plan = default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), cluster.world_size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(memory_upper_bound(plan, model, cluster.world_size(), cluster.gpus_per_node,
                                                cluster.gpu.context_overhead_bytes)
                                 .total_bytes());
  }
  state.counters["layers"] = static_cast<double>(model.layers.size());
}

BENCHMARK_CAPTURE(bound_preset, llama3_8b, "llama3-8b");
BENCHMARK_CAPTURE(bound_preset, llama3_1_405b, "llama3.1-405b");

}  // namespace

BENCHMARK_MAIN();
