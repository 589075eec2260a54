// Tests of lowering: collective counts per step by strategy, schedule well-formedness, memory balance.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include "errors.h"
#include "model_presets.h"
#include "cluster.h"
#include "hardware_catalog.h"
#include "simulator.h"
#include "schedule_fixtures.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

StepSchedule lower_preset(const ModelSpec& model, StrategyKind kind, int world, int micro_batches = 1,
                          bool no_sync = false, const char* precision = "bf16-mixed") {
  TrainingConfig training;
  training.seq_len = 1024;
  training.precision = precision_recipe(precision);
  training.global_batch = micro_batches * world;
  training.no_sync_accumulation = no_sync;
  ShardingStrategy strategy;
  strategy.kind = kind;
  const Plan plan = default_plan(model, training, strategy, wrap_per_block(model), world);
  LoweringOptions options;
  options.world_size = world;
  options.gpus_per_node = 8;
  return lower_plan(plan, model, options);
}

}  // namespace

TEST_CASE("schedule: collective counts per step by strategy (U units incl. the root)") {
  const ModelSpec model = preset_model("llama3-8b");
  const std::size_t U = 33;  // 32 blocks + the root unit
  SUBCASE("full_shard: U reduce-scatters, 2U all-gathers minus the root, which is not resharded after forward") {
    const StepSchedule schedule = lower_preset(model, StrategyKind::full_shard, 16);
    CHECK(schedule.count(OpKind::reduce_scatter) == U);
    CHECK(schedule.count(OpKind::all_gather) == 2 * U - 1);
    CHECK(schedule.count(OpKind::all_reduce) == 0);
  }
  SUBCASE("shard_grad_op: U all-gathers (kept from forward to backward)") {
    const StepSchedule schedule = lower_preset(model, StrategyKind::shard_grad_op, 16);
    CHECK(schedule.count(OpKind::all_gather) == U);
    CHECK(schedule.count(OpKind::reduce_scatter) == U);
  }
  SUBCASE("no_shard: U all-reduces, no all-gather") {
    for (const char* precision : {"bf16-mixed", "fp32"}) {
      const StepSchedule schedule = lower_preset(model, StrategyKind::no_shard, 16, 1, false, precision);
      CHECK(schedule.count(OpKind::all_reduce) == U);
      CHECK(schedule.count(OpKind::all_gather) == 0);
      CHECK(schedule.count(OpKind::reduce_scatter) == 0);
    }
  }
  SUBCASE("hybrid_shard: a reduce-scatter and an all-reduce per unit") {
    const StepSchedule schedule = lower_preset(model, StrategyKind::hybrid_shard, 16);
    CHECK(schedule.count(OpKind::reduce_scatter) == U);
    CHECK(schedule.count(OpKind::all_reduce) == U);
    for (const Op& op : schedule.ops) {
      if (op.kind == OpKind::all_reduce) {
        CHECK(op.group == GroupKind::replica);
        CHECK(op.group_size == 2);
      }
      if (op.kind == OpKind::reduce_scatter) CHECK(op.group_size == 8);
    }
  }
  SUBCASE("k micro-batches with no_sync: reduce-scatter only on the last one") {
    const StepSchedule synced = lower_preset(model, StrategyKind::full_shard, 8, 4, false);
    CHECK(synced.count(OpKind::reduce_scatter) == 4 * U);
    const StepSchedule no_sync = lower_preset(model, StrategyKind::full_shard, 8, 4, true);
    CHECK(no_sync.count(OpKind::reduce_scatter) == U);
    CHECK(no_sync.count(OpKind::all_gather) == 4 * (2 * U - 1));
    for (const Op& op : no_sync.ops) {
      if (op.kind == OpKind::reduce_scatter) CHECK(op.micro_batch == 3);
    }
    CHECK(no_sync.count(OpKind::optimizer_step) == 1);
  }
  SUBCASE("zero1 all-reduces replicated gradients; zero2 reduce-scatters them; neither gathers parameters") {
    const StepSchedule zero1 = lower_preset(model, StrategyKind::zero1, 8);
    CHECK(zero1.count(OpKind::all_reduce) == U);
    CHECK(zero1.count(OpKind::all_gather) == 0);
    const StepSchedule zero2 = lower_preset(model, StrategyKind::zero2, 8);
    CHECK(zero2.count(OpKind::reduce_scatter) == U);
    CHECK(zero2.count(OpKind::all_gather) == 0);
  }
}

TEST_CASE("schedule: well-formed — dependencies point back, every op is in one stream, memory balances") {
  const ModelSpec model = preset_model("llama2-7b");
  for (StrategyKind kind : {StrategyKind::full_shard, StrategyKind::shard_grad_op, StrategyKind::no_shard,
                            StrategyKind::hybrid_shard, StrategyKind::zero1, StrategyKind::zero2}) {
    CAPTURE(to_string(kind));
    const StepSchedule schedule = lower_preset(model, kind, 16, 2, kind == StrategyKind::full_shard);
    MemoryByCategory balance{};
    for (std::size_t index = 0; index < schedule.ops.size(); ++index) {
      const Op& op = schedule.ops[index];
      CHECK(op.id == static_cast<int>(index));
      for (int dep : op.deps) CHECK(dep < op.id);
      const bool collective =
          op.kind == OpKind::all_gather || op.kind == OpKind::reduce_scatter || op.kind == OpKind::all_reduce;
      if (collective) CHECK(op.stream != StreamKind::compute);
      if (op.kind == OpKind::forward || op.kind == OpKind::backward) CHECK(op.stream == StreamKind::compute);
      for (const auto& change : op.allocates) balance[static_cast<std::size_t>(change.category)] += change.bytes;
      for (const auto& change : op.frees) balance[static_cast<std::size_t>(change.category)] -= change.bytes;
      for (const auto& change : op.frees_at_start) balance[static_cast<std::size_t>(change.category)] -= change.bytes;
    }
    // Every transient allocation is freed by the end of the step.
    for (auto bytes : balance) CHECK(bytes == 0);
  }
}

TEST_CASE("schedule: recompute ops for checkpointed layers and the FLOPs they add") {
  const ModelSpec model = preset_model("tiny-llama");
  TrainingConfig training;
  training.seq_len = 64;
  training.checkpointing = ActivationCheckpointing::full;
  const Plan plan = default_plan(model, training, {}, wrap_per_block(model), 2);
  const StepSchedule schedule = lower_plan(plan, model, toy_options(2));
  CHECK(schedule.count(OpKind::recompute) == model.block_count());
  CHECK(schedule.hardware_flops_per_rank > schedule.model_flops_per_rank);
  // Hardware FLOPs are the kernels'; model FLOPs count forward once and backward as twice the forward (Korthikanti
  // et al. 2022 App. A). The difference: every recompute, and what a flash backward does beyond twice its forward
  // (2.5× the attention, FlashAttention-2 §4.1).
  std::map<int, double> forward_flops;
  for (const Op& op : schedule.ops) {
    if (op.kind == OpKind::forward) forward_flops[op.layer] = op.flops;
  }
  double extra_flops = 0, recompute_flops = 0;
  for (const Op& op : schedule.ops) {
    if (op.kind == OpKind::recompute) recompute_flops += op.flops;
    if (op.kind == OpKind::backward) extra_flops += op.flops - 2.0 * forward_flops.at(op.layer);
  }
  CHECK(recompute_flops > 0);
  CHECK(extra_flops > 0);
  CHECK(schedule.hardware_flops_per_rank - schedule.model_flops_per_rank ==
        doctest::Approx(recompute_flops + extra_flops));
}

TEST_CASE("schedule: bad plans name the unit") {
  const ModelSpec model = toy_blocks(3);
  Plan plan = toy_plan(model, 2);
  plan.units[1].forward_prefetch = {7};
  CHECK_THROWS_WITH_AS(lower_plan(plan, model, toy_options(2)), doctest::Contains("unit 1"), InputError);
  plan = toy_plan(model, 2);
  plan.units[2].layers = {0, 2};  // overlaps unit 1
  CHECK_THROWS_WITH_AS(lower_plan(plan, model, toy_options(2)), doctest::Contains("unit 2"), InputError);
  plan = toy_plan(model, 4);
  plan.units[3].strategy = parse_strategy("hybrid_shard:3");
  CHECK_THROWS_WITH_AS(lower_plan(plan, model, toy_options(4)), doctest::Contains("unit 3"), InputError);
  plan = toy_plan(model, 4);
  plan.units[1].reshard_after_forward.group_size = 3;  // not a divisor of the 4-rank shard group
  CHECK_THROWS_WITH_AS(lower_plan(plan, model, toy_options(4)), doctest::Contains("reshard_after_forward"),
                       InputError);
}

TEST_CASE("schedule: reshard_after_forward = k keeps a copy sharded over k and gathers within it in backward") {
  const ModelSpec model = toy_blocks(2);
  Plan plan = toy_plan(model, 16);
  for (std::size_t unit = 1; unit < plan.units.size(); ++unit) plan.units[unit].reshard_after_forward.group_size = 8;
  LoweringOptions options = toy_options(16);
  const StepSchedule schedule = lower_plan(plan, model, options);
  int partial_gathers = 0;
  for (const Op& op : schedule.ops) {
    if (op.kind == OpKind::all_gather && op.group == GroupKind::partial_reshard) {
      ++partial_gathers;
      CHECK(op.group_size == 8);
      CHECK_FALSE(op.group_spans_nodes);
    }
  }
  CHECK(partial_gathers == 2);
}

TEST_CASE("schedule: CPU offload copies shards in before all-gathers and gradients out after reductions") {
  const ModelSpec model = toy_blocks(3);
  Plan plan = toy_plan(model, 2);
  plan.offload.params = true;
  const StepSchedule schedule = lower_plan(plan, model, toy_options(2));
  CHECK(schedule.count(OpKind::host_to_device) == schedule.count(OpKind::all_gather));
  CHECK(schedule.count(OpKind::device_to_host) == schedule.count(OpKind::reduce_scatter));
  // Shards, gradients and optimizer states live in host memory.
  CHECK(schedule.persistent[static_cast<std::size_t>(MemoryCategory::sharded_params)] == 0);
  CHECK(schedule.persistent[static_cast<std::size_t>(MemoryCategory::optimizer_states)] == 0);
  for (const Op& op : schedule.ops) {
    if (op.kind == OpKind::all_gather) {
      const bool after_copy = std::any_of(op.deps.begin(), op.deps.end(), [&](int dep) {
        return schedule.ops[static_cast<std::size_t>(dep)].kind == OpKind::host_to_device;
      });
      CHECK(after_copy);
    }
    if (op.kind == OpKind::optimizer_step) CHECK(op.on_host);
  }
}

// Issue 23, item 5: FSDP copies an offloaded shard in when the unshard is issued (or prefetched), so the shard is
// on the GPU from its all-gather's issue point to the gather's end — not from whenever the copy stream got to it.
// The copy takes the gather's dependencies; in the simulated step it starts no earlier than the gather could be
// issued, and the gather frees the bytes the copy brought in. On the planner's own llama3-70b plan for 8 A100-80GB
// with offload, the copies once ran ahead and left 30.3 GiB of comm_buffers on the GPU at the start of backward.
// Mutation tried: the copy without the gather's deps fails the dependency check (318 of 318 copies); its start and
// the comm_buffers bound still hold then, since the walk issues an op no earlier than the host reaches it where the
// lowering emits it (Note [Schedule order]) — the emission point is what moved the copy, the deps say why.
TEST_CASE("schedule: an offloaded shard is on the GPU only from its all-gather's issue point to the gather's end") {
  const ModelSpec model = preset_model("llama3-70b");
  TrainingConfig training;
  training.seq_len = 4096;
  training.checkpointing = ActivationCheckpointing::full;
  Plan plan = default_plan(model, training, {}, wrap_per_block(model), 8);
  plan.offload.params = true;
  LoweringOptions options;
  options.world_size = 8;
  options.gpus_per_node = 8;
  const StepSchedule schedule = lower_plan(plan, model, options);
  const Cluster cluster = parse_cluster("8xA100-80GB", HardwareCatalog::builtin());
  const SimulationResult simulated = simulate(schedule, profile_from_cluster(cluster), true);
  std::map<int, const TimelineEvent*> event_of;
  for (const TimelineEvent& event : simulated.timeline.events) event_of[event.op_id] = &event;
  int copies = 0;
  for (const Op& gather : schedule.ops) {
    if (gather.kind != OpKind::all_gather) continue;
    const auto copy_at = std::find_if(gather.deps.begin(), gather.deps.end(), [&](int dep) {
      return schedule.ops[static_cast<std::size_t>(dep)].kind == OpKind::host_to_device;
    });
    REQUIRE(copy_at != gather.deps.end());
    const Op& copy = schedule.ops[static_cast<std::size_t>(*copy_at)];
    ++copies;
    // The copy waits for what the gather waits for (its issue point) ...
    double issue_s = 0;
    for (const int dep : gather.deps) {
      if (dep == copy.id) continue;
      CHECK(std::find(copy.deps.begin(), copy.deps.end(), dep) != copy.deps.end());
      issue_s = std::max(issue_s, event_of.at(dep)->end_s);
    }
    CHECK(event_of.at(copy.id)->start_s >= issue_s - 1e-12);
    // ... and the gather frees what it brought in, when the gather ends.
    REQUIRE(copy.allocates.size() == 1);
    CHECK(copy.allocates[0].category == MemoryCategory::comm_buffers);
    const bool freed_by_gather = std::any_of(gather.frees.begin(), gather.frees.end(), [&](const MemoryChange& change) {
      return change.category == MemoryCategory::comm_buffers && change.bytes == copy.allocates[0].bytes;
    });
    CHECK(freed_by_gather);
  }
  CHECK(copies == schedule.count(OpKind::all_gather));
  // Throughout the step only the shards of the gathers in flight (and the reductions' outputs on their way out)
  // are on the GPU: a few units' worth, not 30 GiB.
  long long most_comm_buffers = 0;
  for (const MemorySample& sample : simulated.timeline.memory) {
    most_comm_buffers =
        std::max(most_comm_buffers, sample.bytes[static_cast<std::size_t>(MemoryCategory::comm_buffers)]);
  }
  MESSAGE("llama3-70b on 8xA100-80GB with offload: most comm_buffers in the step "
          << static_cast<double>(most_comm_buffers) / (1 << 30) << " GiB");
  CHECK(most_comm_buffers < 2LL << 30);
}

TEST_CASE("schedule: a unit's backward in the next micro-batch waits for its previous gradient reduction") {
  const ModelSpec model = toy_blocks(3);
  Plan plan = toy_plan(model, 2);
  plan.grad_accumulation_steps = 2;
  const StepSchedule schedule = lower_plan(plan, model, toy_options(2));
  for (int unit = 1; unit <= 3; ++unit) {
    int reduction = -1;
    for (const Op& op : schedule.ops) {
      if (op.kind == OpKind::reduce_scatter && op.unit == unit && op.micro_batch == 0) reduction = op.id;
    }
    REQUIRE(reduction >= 0);
    const auto first_backward = std::find_if(schedule.ops.begin(), schedule.ops.end(), [&](const Op& op) {
      return op.kind == OpKind::backward && op.unit == unit && op.micro_batch == 1;
    });
    REQUIRE(first_backward != schedule.ops.end());
    CHECK(std::find(first_backward->deps.begin(), first_backward->deps.end(), reduction) != first_backward->deps.end());
  }
}

TEST_CASE("schedule: a unit's first backward op of a micro-batch zero-fills its fresh gradient buffer") {
  const ModelSpec model = preset_model("gpt2");
  for (const bool no_sync : {false, true}) {
    const StepSchedule schedule = lower_preset(model, StrategyKind::full_shard, 8, 3, no_sync);
    // Per (unit, micro-batch): the bytes filled, and that only the unit's first backward op fills.
    std::map<std::pair<int, int>, std::int64_t> filled;
    std::map<std::pair<int, int>, bool> seen_backward;
    for (const Op& op : schedule.ops) {
      if (op.kind != OpKind::backward && op.kind != OpKind::recompute) {
        CHECK(op.zeroed_bytes == 0);
        continue;
      }
      const auto key = std::make_pair(op.unit, op.micro_batch);
      if (op.zeroed_bytes > 0) {
        CHECK(op.kind == OpKind::backward);
        CHECK_FALSE(seen_backward[key]);  // the first backward op of the unit in this micro-batch
        // It allocates the same buffer it fills.
        std::int64_t allocated = 0;
        for (const auto& change : op.allocates) {
          if (change.category == MemoryCategory::unsharded_grads) allocated += change.bytes;
        }
        CHECK(allocated == op.zeroed_bytes);
        filled[key] += op.zeroed_bytes;
      }
      if (op.kind == OpKind::backward) seen_backward[key] = true;
    }
    // Every unit fills once per micro-batch when each reduces (its buffer is freed by the reduction), and only in
    // the first micro-batch under no_sync (the buffer accumulates across them).
    for (int unit = 0; unit <= 12; ++unit) {
      for (int micro = 0; micro < 3; ++micro) {
        INFO("no_sync " << no_sync << ", unit " << unit << ", micro-batch " << micro);
        CHECK((filled[{unit, micro}] > 0) == (!no_sync || micro == 0));
      }
    }
  }
}
