// Tests of every term of the closed-form memory bound against values computed by hand (the arithmetic in comments).
#include <doctest/doctest.h>

#include "errors.h"
#include "memory_fixtures.h"
#include "model_presets.h"
#include "unit_layout.h"

using namespace shardplan;
using shardplan::testing::hand_bound;
using shardplan::testing::hand_model;
using shardplan::testing::hand_plan;
using shardplan::testing::hand_training;

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

// Units: root 2012 (emb, norm, head), b0 4000, b1 6001 → 6004 padded, b2 5000. FSDP's plan keeps the root gathered,
// reshards the blocks and prefetches one unit ahead; the rate limiter allows two gathers in flight.
TEST_CASE("memory bound: full_shard, bf16-mixed, AdamW on 4 ranks, term by term") {
  const ModelSpec model = hand_model();
  const MemoryBreakdown m =
      hand_bound(model, hand_plan(model, StrategyKind::full_shard, 4, hand_training("bf16-mixed")), 4);
  // Shards per rank: root 2012/4 = 503, b0 1000, b1 6004/4 = 1501, b2 1250 → 4254 elements.
  CHECK(m.padding_elements == 3);
  CHECK(m.sharded_params_bytes == 4254 * 4);      // fp32 shard
  CHECK(m.sharded_grads_bytes == 4254 * 4);       // fp32 gradient shard
  CHECK(m.optimizer_states_bytes == 4254 * 8);    // Adam m, v in fp32
  // b1 and b2 gathered at once in bf16: b1 in forward while it prefetches b2 (or b2 in backward prefetching b1).
  CHECK(m.unsharded_params_bytes == (6004 + 5000) * 2);
  CHECK(m.root_unit_bytes == 2012 * 2);
  // Every unit's full-size bf16 gradient: backward does not wait for reductions (Note [Closed-form bound]).
  CHECK(m.unsharded_grads_bytes == (2012 + 4000 + 6004 + 5000) * 2);
  // The largest bf16 all-gather input (one gather runs at a time) + the largest reduce-scatter output, b1's.
  CHECK(m.comm_buffers_bytes == 1501 * 2 + 1501 * 2);
  // 16 tokens; each block 10·2 + 4 (flash) = 24 B/token; head 3·2 + 8 = 14 B/token, all kept at the head's backward.
  CHECK(m.activation_bytes == 16 * (3 * 24 + 14));
  CHECK(m.overhead_bytes == 1000);
  CHECK(m.total_bytes() == 17016 + 17016 + 34032 + 22008 + 4024 + 34032 + 6004 + 1376 + 1000);
}

TEST_CASE("memory bound: prefetch lists and the rate limiter bound the units in flight") {
  const ModelSpec model = hand_model();
  Plan plan = hand_plan(model, StrategyKind::full_shard, 4, hand_training("bf16-mixed"));
  for (auto& unit : plan.units) {
    unit.forward_prefetch.clear();
    unit.backward_prefetch.clear();
  }
  CHECK(hand_bound(model, plan, 4).unsharded_params_bytes == 6004 * 2);  // only the unit computing
  shardplan::testing::prefetch_two_ahead(plan);  // forward root → 1, 2, unit u → u+1, u+2; backward root → 3, 2, ...
  // The limiter (two gathers in flight) holds the two largest of b0, b1, b2 however far ahead they are asked for.
  CHECK(hand_bound(model, plan, 4).unsharded_params_bytes == (6004 + 5000) * 2);
  plan.max_inflight_all_gathers = 3;
  CHECK(hand_bound(model, plan, 4).unsharded_params_bytes == (6004 + 5000 + 4000) * 2);
  plan.max_inflight_all_gathers = 0;  // unlimited: b0 computing with b1 and b2 prefetched
  CHECK(hand_bound(model, plan, 4).unsharded_params_bytes == (6004 + 5000 + 4000) * 2);
  // Asked for out of pass order (the root asks for b2 before b0 asks for b1), a gather may be forced past the limiter
  // (ensure_gathered), so the bound stops trusting it: b0 computing with b1 and b2 asked for.
  plan.max_inflight_all_gathers = 2;
  plan.units[0].forward_prefetch = {1, 3};
  CHECK(hand_bound(model, plan, 4).unsharded_params_bytes == (6004 + 5000 + 4000) * 2);
}

TEST_CASE("memory bound: a prefetch of a unit that already ran is charged a copy of every unit per micro-batch") {
  const ModelSpec model = hand_model();
  TrainingConfig training = hand_training("bf16-mixed");
  training.global_batch = 2 * 4 * 3;  // 3 micro-batches
  Plan plan = hand_plan(model, StrategyKind::full_shard, 4, training);
  // b0 comes last in backward; asking for b2 then gathers it again, and nothing frees that copy (the next forward
  // starts with every unit marked not gathered).
  plan.units[1].backward_prefetch = {3};
  const MemoryBreakdown m = hand_bound(model, plan, 4);
  CHECK(m.unsharded_params_bytes == 3 * (4000 + 6004 + 5000) * 2);
  CHECK(m.root_unit_bytes == 3 * 2012 * 2);
}

TEST_CASE("memory bound: shard_grad_op keeps every unit gathered from forward to backward") {
  const ModelSpec model = hand_model();
  const auto m = hand_bound(model, hand_plan(model, StrategyKind::shard_grad_op, 4, hand_training("bf16-mixed")), 4);
  CHECK(m.unsharded_params_bytes == (4000 + 6004 + 5000) * 2);  // kept ones; none is gathered in backward
  CHECK(m.sharded_params_bytes == 4254 * 4);
}

TEST_CASE("memory bound: reshard_after_forward to a smaller group keeps every unit's partial copy") {
  const ModelSpec model = hand_model();
  Plan plan = hand_plan(model, StrategyKind::full_shard, 4, hand_training("bf16-mixed"));
  for (std::size_t id = 1; id < plan.units.size(); ++id) plan.units[id].reshard_after_forward.group_size = 2;
  // The in-flight pair as before, plus each block's copy sharded over 2 in bf16: 4000/2, 6004/2, 5000/2 elements.
  CHECK(hand_bound(model, plan, 4).unsharded_params_bytes == (6004 + 5000) * 2 + (2000 + 3002 + 2500) * 2);
}

TEST_CASE("memory bound: no_shard replicates everything; mixed precision still casts units") {
  const ModelSpec model = hand_model();
  const std::int64_t psi = 17013;
  auto m = hand_bound(model, hand_plan(model, StrategyKind::no_shard, 4, hand_training("bf16-mixed")), 4);
  CHECK(m.padding_elements == 0);
  CHECK(m.sharded_params_bytes == psi * 4);
  CHECK(m.sharded_grads_bytes == psi * 4);
  CHECK(m.optimizer_states_bytes == psi * 8);
  CHECK(m.unsharded_params_bytes == 6001 * 2);  // bf16 copy of the unit in use: casts are never prefetched
  CHECK(m.root_unit_bytes == 2012 * 2);
  CHECK(m.unsharded_grads_bytes == psi * 2);    // bf16 grads before the fp32 accumulate, every unit's
  CHECK(m.comm_buffers_bytes == 0);             // all-reduce in place
  m = hand_bound(model, hand_plan(model, StrategyKind::no_shard, 4, hand_training("fp32")), 4);
  CHECK(m.unsharded_params_bytes == 0);  // fp32 DDP computes on its own parameters
  CHECK(m.root_unit_bytes == 0);
  CHECK(m.unsharded_grads_bytes == 0);
}

TEST_CASE("memory bound: hybrid_shard shards within the group and replicates across") {
  const ModelSpec model = hand_model();
  const TrainingConfig training = hand_training("bf16-mixed");
  const Plan plan = hand_plan(model, StrategyKind::hybrid_shard, 8, training, 4);
  const auto layouts = unit_layouts(plan, model, 8, 8);
  CHECK(layouts[1].param_group == 4);
  CHECK(layouts[1].replicas == 2);
  const MemoryBreakdown m = hand_bound(model, plan, 8);
  CHECK(m.sharded_params_bytes == 4254 * 4);  // same shards as full_shard over 4
  // The largest all-gather input, and every unit's reduce-scatter output: the all-reduce across replicas that frees
  // them may lag without limit.
  CHECK(m.comm_buffers_bytes == 1501 * 2 + 4254 * 2);
  const Plan bad = hand_plan(model, StrategyKind::hybrid_shard, 8, training, 3);  // 3 does not divide 8
  CHECK_THROWS_AS(hand_bound(model, bad, 8), InputError);
}

TEST_CASE("memory bound: activation checkpointing and attention kernels") {
  const ModelSpec model = hand_model();
  TrainingConfig training = hand_training("bf16-mixed");
  const auto activations = [&] {
    return hand_bound(model, hand_plan(model, StrategyKind::full_shard, 4, training), 4).activation_bytes;
  };
  training.checkpointing = ActivationCheckpointing::full;
  // Blocks keep 2 elements (4 B/token). The peak is b2's recompute, 24 − 4 = 20 B/token beside the three kept inputs;
  // the head's 14 B/token were freed by its backward before.
  CHECK(activations() == 16 * (3 * 4 + 20));
  training.checkpointing = ActivationCheckpointing::none;
  training.flash_attention = false;
  // Without flash the scores add 1 element × s = 8 positions × 2 bytes per token per block: 36 B/token.
  CHECK(activations() == 16 * (3 * 36 + 14));
  // Selective recompute drops the scores again (20 B/token kept) and rebuilds them, 16 B/token, in b2's backward:
  // 3 · 20 + 16 beside it beats 3 · 20 + 14 at the head's.
  training.checkpointing = ActivationCheckpointing::selective;
  CHECK(activations() == 16 * (3 * 20 + 16));
}

TEST_CASE("memory bound: gradient accumulation, with and without no_sync, charges every unit's gradient once") {
  const ModelSpec model = hand_model();
  TrainingConfig training = hand_training("bf16-mixed");
  training.global_batch = 2 * 4 * 3;  // micro-batch 2 × 4 ranks × 3 accumulation steps
  training.no_sync_accumulation = true;
  const Plan plan = hand_plan(model, StrategyKind::full_shard, 4, training);
  CHECK(plan.grad_accumulation_steps == 3);
  CHECK(hand_bound(model, plan, 4).unsharded_grads_bytes == (2012 + 4000 + 6004 + 5000) * 2);
  training.no_sync_accumulation = false;
  const MemoryBreakdown synced = hand_bound(model, hand_plan(model, StrategyKind::full_shard, 4, training), 4);
  CHECK(synced.unsharded_grads_bytes == (2012 + 4000 + 6004 + 5000) * 2);
  training.global_batch = 2 * 4 * 3 + 1;
  CHECK_THROWS_WITH_AS(hand_plan(model, StrategyKind::full_shard, 4, training), doctest::Contains("--global-batch"),
                       InputError);
}

TEST_CASE("memory bound: wrapping policies change the transient terms, not the model states") {
  const ModelSpec model = preset_model("llama2-7b");
  TrainingConfig training;
  training.seq_len = 4096;
  const auto bound = [&](const Wrapping& wrapping) {
    return memory_upper_bound(default_plan(model, training, {}, wrapping, 8), model, 8, 8, 0);
  };
  const MemoryBreakdown per_block = bound(wrap_per_block(model));
  const MemoryBreakdown four = bound(wrap_blocks(model, 4));
  const MemoryBreakdown whole = bound(wrap_whole(model));
  CHECK(resolve_units(model, wrap_blocks(model, 4)).size() == 1 + 8);
  CHECK(per_block.model_states_bytes() == doctest::Approx(four.model_states_bytes()).epsilon(1e-6));
  CHECK(per_block.unsharded_params_bytes < four.unsharded_params_bytes);
  // One unit: the whole model is gathered at once.
  CHECK(whole.root_unit_bytes == model.param_count() * 2);
  CHECK(whole.unsharded_params_bytes == 0);
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
