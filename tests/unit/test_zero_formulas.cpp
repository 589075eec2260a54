// The ZeRO paper's model-state formulas (§5) fall out of the simulated step's model states (persistent_memory, what
// the lowered step starts with), and its peak scales with N as it must.
#include <doctest/doctest.h>

#include "cluster.h"
#include "errors.h"
#include "memory_fixtures.h"
#include "model_presets.h"
#include "step_analysis.h"

using namespace shardplan;

namespace {

// A model of `units` blocks of `per_unit` parameters each, wrapped one unit per block (Ψ = units × per_unit).
ModelSpec uniform_model(std::int64_t units, std::int64_t per_unit) {
  ModelSpec model;
  model.name = "uniform";
  model.hidden_size = 1;
  model.num_heads = 1;
  for (std::int64_t u = 0; u < units; ++u) {
    LayerSpec block;
    block.name = "block." + std::to_string(u);
    block.kind = LayerKind::transformer_block;
    block.tensors = {{"w", {per_unit}}};
    model.layers.push_back(block);
  }
  return model;
}

MemoryBreakdown zero_peak(const ModelSpec& model, StrategyKind kind, int world) {
  const Plan plan = shardplan::testing::hand_plan(model, kind, world, shardplan::testing::hand_training("zero-fp16"));
  return shardplan::testing::hand_step(model, plan, world).peak;
}

std::int64_t model_states(const ModelSpec& model, StrategyKind kind, int world) {
  return zero_peak(model, kind, world).model_states_bytes();
}

}  // namespace

TEST_CASE("zero: stage formulas with the fp16 recipe, K = 12, for several Ψ and N") {
  const std::int64_t K = 12;
  for (int world : {1, 2, 4, 8, 64, 1024}) {
    for (std::int64_t units : {1, 3, 32}) {
      // Per-unit sizes that are multiples of every N above, so no padding enters the exact formulas.
      for (std::int64_t per_unit : {std::int64_t{1024} * 3, std::int64_t{1024} * 117}) {
        const ModelSpec model = uniform_model(units, per_unit);
        const std::int64_t psi = units * per_unit;
        CAPTURE(world);
        CAPTURE(psi);
        CHECK(model_states(model, StrategyKind::no_shard, world) == 2 * psi + 2 * psi + K * psi);   // DDP: 16Ψ
        CHECK(model_states(model, StrategyKind::zero1, world) == 4 * psi + K * psi / world);        // P_os
        CHECK(model_states(model, StrategyKind::zero2, world) == 2 * psi + (2 + K) * psi / world);  // P_os+g
        CHECK(model_states(model, StrategyKind::zero3, world) == (4 + K) * psi / world);            // P_os+g+p
        // FSDP's FULL_SHARD is stage 3.
        CHECK(model_states(model, StrategyKind::full_shard, world) == (4 + K) * psi / world);
      }
    }
  }
}

TEST_CASE("zero: the paper's 7.5B example on 64 GPUs (Fig. 1: 120, 31.4, 16.6, 1.9 GB)") {
  const ModelSpec model = uniform_model(64, 117'187'500);  // Ψ = 7.5e9
  CHECK(static_cast<double>(model_states(model, StrategyKind::no_shard, 64)) / 1e9 == doctest::Approx(120.0));
  CHECK(static_cast<double>(model_states(model, StrategyKind::zero1, 64)) / 1e9 == doctest::Approx(31.4).epsilon(0.002));
  CHECK(static_cast<double>(model_states(model, StrategyKind::zero2, 64)) / 1e9 == doctest::Approx(16.6).epsilon(0.003));
  CHECK(static_cast<double>(model_states(model, StrategyKind::zero3, 64)) / 1e9 == doctest::Approx(1.875).epsilon(0.002));
}

TEST_CASE("zero: padding is counted when a unit does not divide by N") {
  const ModelSpec model = uniform_model(2, 8 * 1000 + 1);  // each unit pads 7 elements on 8 ranks
  const MemoryBreakdown peak = zero_peak(model, StrategyKind::zero3, 8);
  CHECK(peak.padding_elements == 2 * 7);
  CHECK(peak.model_states_bytes() == 2 * 1001 * 16);  // ceil(8001 / 8) = 1001 per unit per rank
}

TEST_CASE("zero: per-rank memory falls with N for full_shard, not for no_shard; hybrid_shard in between") {
  const ModelSpec model = preset_model("llama2-13b");
  TrainingConfig training;
  training.seq_len = 4096;
  training.checkpointing = ActivationCheckpointing::full;
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  std::int64_t previous_full = 0, previous_none = 0;
  for (const char* text : {"8xA100-80GB", "2x8xA100-80GB", "4x8xA100-80GB", "8x8xA100-80GB", "32x8xA100-80GB"}) {
    CAPTURE(text);
    const Cluster cluster = parse_cluster(text, catalog);
    const auto total = [&](StrategyKind kind) {
      ShardingStrategy strategy;
      strategy.kind = kind;
      const Plan plan = default_plan(model, training, strategy, wrap_per_block(model), cluster.world_size());
      return analyze_step(model, cluster, profile_from_cluster(cluster), plan, false).simulation.summary.peak_memory_bytes;
    };
    const std::int64_t full = total(StrategyKind::full_shard);
    const std::int64_t none = total(StrategyKind::no_shard);
    const std::int64_t hybrid = total(StrategyKind::hybrid_shard);  // shard group = the 8 GPUs of a node
    if (previous_full != 0) {
      CHECK(full < previous_full);
      CHECK(none == previous_none);
    }
    CHECK(hybrid >= full);
    CHECK(hybrid < none);
    if (cluster.world_size() > 8) CHECK(hybrid > full);
    previous_full = full;
    previous_none = none;
  }
}
