// Tests of every memory-model term against values computed by hand (see the arithmetic in each comment).
#include <doctest/doctest.h>

#include "errors.h"
#include "memory_fixtures.h"
#include "model_presets.h"

using namespace shardplan;
using shardplan::testing::hand_model;
using shardplan::testing::hand_query;

TEST_CASE("memory: units and padding to a multiple of the shard group") {
  const ModelSpec model = hand_model();
  const auto units = resolve_units(model, wrap_per_block(model));
  REQUIRE(units.size() == 4);
  CHECK(units[0].is_root);
  CHECK(units[0].param_count == 1002 + 10 + 1000);  // the layers no unit covers
  CHECK(units[2].param_count == 6001);
  CHECK(units[2].padded_count(4) == 6004);          // right-padded: 3 elements
  CHECK(units[2].shard_count(4) == 1501);
  CHECK(units[1].padded_count(4) == 4000);          // already a multiple: no padding
  CHECK(units[2].padded_count(1) == 6001);
}

TEST_CASE("memory: full_shard, bf16-mixed, AdamW on 4 ranks, term by term") {
  const ModelSpec model = hand_model();
  const MemoryEstimate estimate = estimate_memory(hand_query(model, StrategyKind::full_shard, 4, "bf16-mixed"));
  const MemoryBreakdown& m = estimate.breakdown;
  // Shards per rank: root 2012/4 = 503, b0 1000, b1 6004/4 = 1501, b2 1250 → 4254 elements.
  CHECK(m.padding_elements == 3);
  CHECK(m.sharded_params_bytes == 4254 * 4);      // fp32 shard
  CHECK(m.sharded_grads_bytes == 4254 * 4);       // fp32 gradient shard
  CHECK(m.optimizer_states_bytes == 4254 * 8);    // Adam m, v in fp32
  CHECK(m.unsharded_params_bytes == (6004 + 5000) * 2);  // two largest units in flight (current + 1 prefetched), bf16
  CHECK(m.root_unit_bytes == 2012 * 2);
  CHECK(m.unsharded_grads_bytes == 2012 * 2 + 6004 * 2 + 5000 * 2);  // root's + the two largest units', bf16
  CHECK(m.comm_buffers_bytes == 1501 * 2 + 1501 * 2);     // bf16 all-gather input + reduce-scatter output
  // 16 tokens; each block 10·2 + 4 (flash) = 24 B/token; head 3·2 + 8 = 14 B/token.
  CHECK(m.activation_bytes == 16 * (3 * 24 + 14));
  CHECK(m.overhead_bytes == 1000);
  CHECK(m.total_bytes() == 17016 + 17016 + 34032 + 22008 + 4024 + 26032 + 6004 + 1376 + 1000);
  CHECK(estimate.fits());
  CHECK(m.dominant_term() == "optimizer_states");
}

TEST_CASE("memory: prefetch depth and the rate limiter bound the units in flight") {
  const ModelSpec model = hand_model();
  MemoryQuery query = hand_query(model, StrategyKind::full_shard, 4, "bf16-mixed");
  query.prefetch_units = 0;
  CHECK(estimate_memory(query).breakdown.unsharded_params_bytes == 6004 * 2);
  query.prefetch_units = 2;  // wants three units, but FSDP1's limiter allows two gathered at once
  CHECK(estimate_memory(query).breakdown.unsharded_params_bytes == (6004 + 5000) * 2);
  query.max_gathered_units = 3;
  CHECK(estimate_memory(query).breakdown.unsharded_params_bytes == (6004 + 5000 + 4000) * 2);
}

TEST_CASE("memory: shard_grad_op keeps every unit gathered from forward to backward") {
  const ModelSpec model = hand_model();
  const auto m = estimate_memory(hand_query(model, StrategyKind::shard_grad_op, 4, "bf16-mixed")).breakdown;
  CHECK(m.unsharded_params_bytes == (4000 + 6004 + 5000) * 2);
  CHECK(m.sharded_params_bytes == 4254 * 4);
}

TEST_CASE("memory: no_shard replicates everything; mixed precision still casts units") {
  const ModelSpec model = hand_model();
  const std::int64_t psi = 17013;
  auto m = estimate_memory(hand_query(model, StrategyKind::no_shard, 4, "bf16-mixed")).breakdown;
  CHECK(m.padding_elements == 0);
  CHECK(m.sharded_params_bytes == psi * 4);
  CHECK(m.sharded_grads_bytes == psi * 4);
  CHECK(m.optimizer_states_bytes == psi * 8);
  CHECK(m.unsharded_params_bytes == (6001 + 5000) * 2);  // bf16 copies of the units in use
  CHECK(m.unsharded_grads_bytes == 2012 * 2 + 6001 * 2 + 5000 * 2);  // bf16 grads before the fp32 accumulate
  CHECK(m.comm_buffers_bytes == 0);                       // all-reduce in place
  m = estimate_memory(hand_query(model, StrategyKind::no_shard, 4, "fp32")).breakdown;
  CHECK(m.unsharded_params_bytes == 0);  // fp32 DDP computes on its own parameters
  CHECK(m.root_unit_bytes == 0);
  CHECK(m.unsharded_grads_bytes == 0);
}

TEST_CASE("memory: hybrid_shard shards within the group and replicates across") {
  const ModelSpec model = hand_model();
  MemoryQuery query = hand_query(model, StrategyKind::hybrid_shard, 8, "bf16-mixed");
  query.strategy.shard_group_size = 4;
  const MemoryEstimate estimate = estimate_memory(query);
  CHECK(estimate.layout.param_group == 4);
  CHECK(estimate.layout.replicas == 2);
  CHECK(estimate.breakdown.sharded_params_bytes == 4254 * 4);  // same shards as full_shard over 4
  query.strategy.shard_group_size = 3;  // does not divide 8
  CHECK_THROWS_AS(estimate_memory(query), InputError);
}

TEST_CASE("memory: activation checkpointing and attention kernels") {
  const ModelSpec model = hand_model();
  MemoryQuery query = hand_query(model, StrategyKind::full_shard, 4, "bf16-mixed");
  query.training.checkpointing = ActivationCheckpointing::full;
  // Blocks keep 2 elements (4 B/token); the head 14 B/token; one block is rebuilt during its backward: 24 B/token.
  CHECK(estimate_memory(query).breakdown.activation_bytes == 16 * (3 * 4 + 14 + 24));
  query.training.checkpointing = ActivationCheckpointing::none;
  query.training.flash_attention = false;
  // Without flash the scores add 1 element × s = 8 positions × 2 bytes per token per block: 36 B/token.
  CHECK(estimate_memory(query).breakdown.activation_bytes == 16 * (3 * 36 + 14));
  query.training.checkpointing = ActivationCheckpointing::selective;  // drops the scores again
  CHECK(estimate_memory(query).breakdown.activation_bytes == 16 * (3 * 20 + 14));
}

TEST_CASE("memory: no_sync gradient accumulation keeps every unit's unsharded gradient") {
  const ModelSpec model = hand_model();
  MemoryQuery query = hand_query(model, StrategyKind::full_shard, 4, "bf16-mixed");
  query.training.global_batch = 2 * 4 * 3;  // micro-batch 2 × 4 ranks × 3 accumulation steps
  query.training.no_sync_accumulation = true;
  const MemoryEstimate estimate = estimate_memory(query);
  CHECK(estimate.grad_accumulation_steps == 3);
  CHECK(estimate.breakdown.unsharded_grads_bytes == (2012 + 4000 + 6004 + 5000) * 2);
  query.training.no_sync_accumulation = false;
  CHECK(estimate_memory(query).breakdown.unsharded_grads_bytes == (2012 + 6004 + 5000) * 2);
  query.training.global_batch = 2 * 4 * 3 + 1;
  CHECK_THROWS_WITH_AS(estimate_memory(query), doctest::Contains("--global-batch"), InputError);
}

TEST_CASE("memory: wrapping policies change the transient terms, not the model states") {
  const ModelSpec model = preset_model("llama2-7b");
  const Cluster cluster = parse_cluster("8xA100-80GB", HardwareCatalog::builtin());
  TrainingConfig training;
  training.seq_len = 4096;
  const auto per_block = estimate_memory(memory_query_for(model, cluster, wrap_per_block(model), {}, training));
  const auto four = estimate_memory(memory_query_for(model, cluster, wrap_blocks(model, 4), {}, training));
  const auto whole = estimate_memory(memory_query_for(model, cluster, wrap_whole(model), {}, training));
  CHECK(four.units.size() == 1 + 8);
  CHECK(whole.units.size() == 1);
  CHECK(per_block.breakdown.model_states_bytes() == doctest::Approx(four.breakdown.model_states_bytes()).epsilon(1e-6));
  CHECK(per_block.breakdown.unsharded_params_bytes < four.breakdown.unsharded_params_bytes);
  // One unit: the whole model is gathered at once.
  CHECK(whole.breakdown.root_unit_bytes == model.param_count() * 2);
  CHECK(whole.breakdown.unsharded_params_bytes == 0);
}

TEST_CASE("memory: tied layers must share a unit") {
  const ModelSpec model = preset_model("gpt2");
  Wrapping wrapping = wrap_per_block(model);
  wrapping.units.push_back({model.layers.size() - 1, model.layers.size()});  // the tied head alone
  CHECK_THROWS_WITH_AS(resolve_units(model, wrapping), doctest::Contains("tied"), InputError);
  Wrapping overlapping;
  overlapping.units = {{2, 4}, {3, 5}};
  CHECK_THROWS_WITH_AS(resolve_units(model, overlapping), doctest::Contains("unit 2"), InputError);
}
