// Tests of every memory term of the simulated step (each at its largest, Note [Terms at their largest]) against values
// computed by hand (the arithmetic in comments).
#include <doctest/doctest.h>

#include "errors.h"
#include "memory_fixtures.h"
#include "model_presets.h"
#include "unit_layout.h"

using namespace shardplan;
using shardplan::testing::hand_step;
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
  const TrainingConfig training = hand_training("bf16-mixed");
  const auto on_4 = unit_layouts(hand_plan(model, StrategyKind::full_shard, 4, training), model, 4, 4);
  CHECK(on_4[2].padded_elements == 6004);  // right-padded: 3 elements
  CHECK(on_4[2].shard_elements == 1501);
  CHECK(on_4[1].padded_elements == 4000);  // already a multiple: no padding
  CHECK(padding_elements(on_4) == 3);
  const auto on_1 = unit_layouts(hand_plan(model, StrategyKind::full_shard, 1, training), model, 1, 1);
  CHECK(on_1[2].padded_elements == 6001);
}

// Units: root 2012 (emb, norm, head), b0 4000, b1 6001 → 6004 padded, b2 5000. FSDP's plan keeps the root gathered,
// reshards the blocks and prefetches one unit ahead; the rate limiter allows two gathers in flight.
TEST_CASE("memory: full_shard, bf16-mixed, AdamW on 4 ranks, term by term") {
  const ModelSpec model = hand_model();
  const auto step = hand_step(model, hand_plan(model, StrategyKind::full_shard, 4, hand_training("bf16-mixed")), 4);
  const MemoryBreakdown& m = step.largest;
  // Shards per rank: root 2012/4 = 503, b0 1000, b1 6004/4 = 1501, b2 1250 → 4254 elements.
  CHECK(m.padding_elements == 3);
  CHECK(m.sharded_params_bytes == 4254 * 4);      // fp32 shard
  CHECK(m.sharded_grads_bytes == 4254 * 4);       // fp32 gradient shard
  CHECK(m.optimizer_states_bytes == 4254 * 8);    // Adam m, v in fp32
  // b1 and b2 gathered at once in bf16: b1 in forward while it prefetches b2 (or b2 in backward prefetching b1).
  CHECK(m.unsharded_params_bytes == (6004 + 5000) * 2);
  CHECK(m.root_unit_bytes == 2012 * 2);
  // Full-size bf16 gradients: a reduction releases one when the next reduction starts (Note [Reduction buffers] in
  // schedule.h) and backward outruns these latency-bound reduce-scatters, so the root's, b2's and b1's are alive at
  // once; b0's comes after the root's was released (13016 elements is no other sum of the units).
  CHECK(m.unsharded_grads_bytes == (2012 + 6004 + 5000) * 2);
  // In b1's backward: b0's shard cast to bf16 for the gather b1 prefetches, beside b2's reduce-scatter output, held
  // until b1's reduce-scatter starts (1000 + 1250 elements; no other cast and held output add up to more at once).
  CHECK(m.comm_buffers_bytes == (1000 + 1250) * 2);
  // 16 tokens; each block 10·2 + 4 (flash) = 24 B/token; head 3·2 + 8 = 14 B/token, all kept at the head's backward.
  CHECK(m.activation_bytes == 16 * (3 * 24 + 14));
  CHECK(m.overhead_bytes == 1000);
  // The model states and the overhead are the step's from start to end: the peak has them too.
  CHECK(step.peak.model_states_bytes() == 17016 + 17016 + 34032);
  CHECK(step.peak.overhead_bytes == 1000);
}

TEST_CASE("memory: prefetch lists and the rate limiter bound the units in flight") {
  const ModelSpec model = hand_model();
  Plan plan = hand_plan(model, StrategyKind::full_shard, 4, hand_training("bf16-mixed"));
  for (auto& unit : plan.units) {
    unit.forward_prefetch.clear();
    unit.backward_prefetch.clear();
  }
  CHECK(hand_step(model, plan, 4).largest.unsharded_params_bytes == 6004 * 2);  // only the unit computing
  shardplan::testing::prefetch_two_ahead(plan);  // forward root → 1, 2, unit u → u+1, u+2; backward root → 3, 2, ...
  // The limiter (two gathers in flight) holds the two largest of b0, b1, b2 however far ahead they are asked for.
  CHECK(hand_step(model, plan, 4).largest.unsharded_params_bytes == (6004 + 5000) * 2);
  plan.max_inflight_all_gathers = 3;
  CHECK(hand_step(model, plan, 4).largest.unsharded_params_bytes == (6004 + 5000 + 4000) * 2);
  plan.max_inflight_all_gathers = 0;  // unlimited: b0 computing with b1 and b2 prefetched
  CHECK(hand_step(model, plan, 4).largest.unsharded_params_bytes == (6004 + 5000 + 4000) * 2);
  // Asked for out of pass order (the root asks for b2 before b0 asks for b1), the limiter still holds two gathered
  // blocks at most in this step: b1 and b2.
  plan.max_inflight_all_gathers = 2;
  plan.units[0].forward_prefetch = {1, 3};
  CHECK(hand_step(model, plan, 4).largest.unsharded_params_bytes == (6004 + 5000) * 2);
}

TEST_CASE("memory: a prefetch of a unit that already ran leaks a copy of it per micro-batch") {
  const ModelSpec model = hand_model();
  TrainingConfig training = hand_training("bf16-mixed");
  training.global_batch = 2 * 4 * 3;  // 3 micro-batches
  Plan plan = hand_plan(model, StrategyKind::full_shard, 4, training);
  // b0 comes last in backward; asking for b2 then gathers it again, and nothing frees that copy (the next forward
  // starts with every unit marked not gathered).
  plan.units[1].backward_prefetch = {3};
  const MemoryBreakdown m = hand_step(model, plan, 4).largest;
  // In the last micro-batch's forward: the copies of b2 left by the first two backwards, beside b1 computing with b2
  // prefetched (6004 + 3 × 5000; no other sum of the blocks' sizes gives 21004). The root is never gathered twice.
  CHECK(m.unsharded_params_bytes == (6004 + 3 * 5000) * 2);
  CHECK(m.root_unit_bytes == 2012 * 2);
}

TEST_CASE("memory: shard_grad_op keeps every unit gathered from forward to backward") {
  const ModelSpec model = hand_model();
  const auto m = hand_step(model, hand_plan(model, StrategyKind::shard_grad_op, 4, hand_training("bf16-mixed")), 4).largest;
  CHECK(m.unsharded_params_bytes == (4000 + 6004 + 5000) * 2);  // kept ones; none is gathered in backward
  CHECK(m.sharded_params_bytes == 4254 * 4);
}

TEST_CASE("memory: reshard_after_forward to a smaller group keeps every unit's partial copy") {
  const ModelSpec model = hand_model();
  Plan plan = hand_plan(model, StrategyKind::full_shard, 4, hand_training("bf16-mixed"));
  for (std::size_t id = 1; id < plan.units.size(); ++id) plan.units[id].reshard_after_forward.group_size = 2;
  // At b2's backward: b2 gathered and b1's backward gather in flight, beside b0's and b1's copies sharded over 2 in
  // bf16 (4000/2, 6004/2 elements); b2's partial copy was released when b2's gather from it ended.
  CHECK(hand_step(model, plan, 4).largest.unsharded_params_bytes == (6004 + 5000) * 2 + (2000 + 3002) * 2);
}

TEST_CASE("memory: no_shard replicates everything; mixed precision still casts units") {
  const ModelSpec model = hand_model();
  const std::int64_t psi = 17013;
  auto m = hand_step(model, hand_plan(model, StrategyKind::no_shard, 4, hand_training("bf16-mixed")), 4).largest;
  CHECK(m.padding_elements == 0);
  CHECK(m.sharded_params_bytes == psi * 4);
  CHECK(m.sharded_grads_bytes == psi * 4);
  CHECK(m.optimizer_states_bytes == psi * 8);
  CHECK(m.unsharded_params_bytes == 6001 * 2);  // bf16 copy of the unit in use: casts are never prefetched
  CHECK(m.root_unit_bytes == 2012 * 2);
  CHECK(m.unsharded_grads_bytes == (2012 + 6001 + 5000) * 2);  // bf16 grads before the fp32 accumulate: three at once
  CHECK(m.comm_buffers_bytes == 0);             // all-reduce in place
  m = hand_step(model, hand_plan(model, StrategyKind::no_shard, 4, hand_training("fp32")), 4).largest;
  CHECK(m.unsharded_params_bytes == 0);  // fp32 DDP computes on its own parameters
  CHECK(m.root_unit_bytes == 0);
  CHECK(m.unsharded_grads_bytes == 0);
}

TEST_CASE("memory: hybrid_shard shards within the group and replicates across") {
  const ModelSpec model = hand_model();
  const TrainingConfig training = hand_training("bf16-mixed");
  const Plan plan = hand_plan(model, StrategyKind::hybrid_shard, 8, training, 4);
  const auto layouts = unit_layouts(plan, model, 8, 8);
  CHECK(layouts[1].param_group == 4);
  CHECK(layouts[1].replicas == 2);
  const MemoryBreakdown m = hand_step(model, plan, 8).largest;
  CHECK(m.sharded_params_bytes == 4254 * 4);  // same shards as full_shard over 4
  // b1's shard cast for the gather b2 prefetches in backward, beside b2's reduce-scatter output, which its all-reduce
  // across the replicas holds (1501 + 1250 elements).
  CHECK(m.comm_buffers_bytes == (1501 + 1250) * 2);
  const Plan bad = hand_plan(model, StrategyKind::hybrid_shard, 8, training, 3);  // 3 does not divide 8
  CHECK_THROWS_AS(hand_step(model, bad, 8), InputError);
}

TEST_CASE("memory: activation checkpointing and attention kernels") {
  const ModelSpec model = hand_model();
  TrainingConfig training = hand_training("bf16-mixed");
  const auto activations = [&] {
    return hand_step(model, hand_plan(model, StrategyKind::full_shard, 4, training), 4).largest.activation_bytes;
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

TEST_CASE("memory: gradient accumulation keeps every unit's gradient with no_sync, three at once without") {
  const ModelSpec model = hand_model();
  TrainingConfig training = hand_training("bf16-mixed");
  training.global_batch = 2 * 4 * 3;  // micro-batch 2 × 4 ranks × 3 accumulation steps
  training.no_sync_accumulation = true;
  const Plan plan = hand_plan(model, StrategyKind::full_shard, 4, training);
  CHECK(plan.grad_accumulation_steps == 3);
  CHECK(hand_step(model, plan, 4).largest.unsharded_grads_bytes == (2012 + 4000 + 6004 + 5000) * 2);
  training.no_sync_accumulation = false;
  const MemoryBreakdown synced = hand_step(model, hand_plan(model, StrategyKind::full_shard, 4, training), 4).largest;
  CHECK(synced.unsharded_grads_bytes == (2012 + 6004 + 5000) * 2);  // as in one micro-batch: root, b2, b1
  training.global_batch = 2 * 4 * 3 + 1;
  CHECK_THROWS_WITH_AS(hand_plan(model, StrategyKind::full_shard, 4, training), doctest::Contains("--global-batch"),
                       InputError);
}

TEST_CASE("memory: wrapping policies change the transient terms, not the model states") {
  const ModelSpec model = preset_model("llama2-7b");
  TrainingConfig training;
  training.seq_len = 4096;
  const auto largest = [&](const Wrapping& wrapping) {
    return hand_step(model, default_plan(model, training, {}, wrapping, 8), 8).largest;
  };
  const MemoryBreakdown per_block = largest(wrap_per_block(model));
  const MemoryBreakdown four = largest(wrap_blocks(model, 4));
  const MemoryBreakdown whole = largest(wrap_whole(model));
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
