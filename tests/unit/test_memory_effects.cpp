// Tests of the memory walk over the flattened memory effects (Note [Memory effects table]): its result equals a plain
// walk that sorts every op's changes and applies them from the ops themselves, for lowered schedules of several plans
// (with the lowering's table and without it) and for a stream whose tied instants come out of order.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <span>

#include "caching_allocator.h"
#include "cluster.h"
#include "lowering.h"
#include "memory_effects.h"
#include "memory_walk.h"
#include "model_presets.h"
#include "schedule_fixtures.h"
#include "simulator.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

// What walk_memory computes, the plain way: every op's events sorted by applies_before, each change read from the op
// and its size class looked up from its layer.
struct PlainWalk {
  std::int64_t peak_bytes = 0;
  MemoryByCategory at_peak{};
  int peak_op_id = -1;
  std::int64_t pools_reserved_bytes = 0;
  std::vector<std::int64_t> totals_after_each_event;
};

PlainWalk plain_walk(const StepSchedule& schedule, const Timeline& timeline) {
  std::vector<MemoryEvent> events;
  for (const TimelineEvent& placed : timeline.events) {
    const Op& op = schedule.ops[static_cast<std::size_t>(placed.op_id)];
    if (!op.allocates.empty() || !op.frees_at_start.empty()) events.push_back({placed.start_s, op.id, false});
    if (!op.frees.empty()) events.push_back({placed.end_s, op.id, true});
  }
  std::sort(events.begin(), events.end(), applies_before);
  PlainWalk walk;
  MemoryByCategory current = schedule.persistent;
  std::int64_t total = 0;
  for (auto bytes : current) total += bytes;
  walk.peak_bytes = total;
  walk.at_peak = current;
  std::array<SizeClassPool, kAllocatorPoolCount> pools;
  for (std::size_t category = 0; category < kMemoryCategoryCount; ++category) {
    const int pool = allocator_pool(static_cast<MemoryCategory>(category));
    if (pool >= 0) pools[static_cast<std::size_t>(pool)].allocate(current[category], 0);
  }
  for (const MemoryEvent& event : events) {
    const Op& op = schedule.ops[static_cast<std::size_t>(event.op_id)];
    const auto apply = [&](std::span<const MemoryChange> changes, int sign) {
      for (const MemoryChange& change : changes) {
        current[static_cast<std::size_t>(change.category)] += sign * change.bytes;
        total += sign * change.bytes;
        const int pool = allocator_pool(change.category);
        if (pool < 0) continue;
        const std::int64_t size_class = change.category == MemoryCategory::activations && op.layer >= 0
                                            ? schedule.activation_tensor_bytes[static_cast<std::size_t>(op.layer)]
                                            : 0;
        if (sign > 0) {
          pools[static_cast<std::size_t>(pool)].allocate(change.bytes, size_class);
        } else {
          pools[static_cast<std::size_t>(pool)].free(change.bytes, size_class);
        }
      }
    };
    if (event.is_free) {
      apply(op.frees, -1);
    } else {
      apply(op.frees_at_start, -1);
      apply(op.allocates, +1);
    }
    if (total > walk.peak_bytes) {
      walk.peak_bytes = total;
      walk.at_peak = current;
      walk.peak_op_id = event.op_id;
    }
    walk.totals_after_each_event.push_back(total);
  }
  for (const SizeClassPool& pool : pools) walk.pools_reserved_bytes += pool.reserved_bytes();
  return walk;
}

void check_walk_equals_plain(const StepSchedule& schedule, const HardwareProfile& profile) {
  // No device bound, so reserved is the pools' sum as the plain walk computes it.
  HardwareProfile unbounded = profile;
  unbounded.device_memory_bytes = 0;
  const SimulationResult simulated = simulate(schedule, unbounded, true);
  const PlainWalk plain = plain_walk(schedule, simulated.timeline);
  const SimulationSummary& summary = simulated.summary;
  CHECK(summary.peak_memory_bytes == plain.peak_bytes);
  CHECK(summary.memory_at_peak == plain.at_peak);
  CHECK(summary.peak_op_id == plain.peak_op_id);
  const std::int64_t overhead = schedule.persistent[static_cast<std::size_t>(MemoryCategory::overhead)];
  CHECK(summary.reserved_peak_bytes == plain.pools_reserved_bytes);
  CHECK(summary.device_peak_bytes == plain.pools_reserved_bytes + overhead);
  // The timeline's samples: one per instant, the last event's total at that instant.
  REQUIRE(!plain.totals_after_each_event.empty());
  CHECK(simulated.timeline.memory.back().total_bytes() == plain.totals_after_each_event.back());
  std::int64_t sampled_peak = 0;
  for (const MemorySample& sample : simulated.timeline.memory) sampled_peak = std::max<std::int64_t>(
      sampled_peak, sample.total_bytes());
  CHECK(sampled_peak <= plain.peak_bytes);
}

}  // namespace

TEST_CASE("memory effects: the walk over the lowering's table equals a plain sorted walk over the ops") {
  const ModelSpec model = preset_model("llama3-8b");
  const Cluster cluster = parse_cluster("2x8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  LoweringOptions options;
  options.world_size = cluster.world_size();
  options.gpus_per_node = cluster.gpus_per_node;
  struct Case {
    const char* name;
    ActivationCheckpointing checkpointing;
    std::int64_t global_batch;  // sequences; 2 micro-batches per rank at 32
    StrategyKind strategy;
    bool offload;
  };
  for (const Case& variant : {Case{"per block, no AC", ActivationCheckpointing::none, 0, StrategyKind::full_shard, false},
                              Case{"full AC, 2 micro-batches", ActivationCheckpointing::full, 32,
                                   StrategyKind::full_shard, false},
                              Case{"HSDP", ActivationCheckpointing::full, 0, StrategyKind::hybrid_shard, false},
                              Case{"ZeRO-2", ActivationCheckpointing::none, 32, StrategyKind::shard_grad_op, false},
                              Case{"CPU offload", ActivationCheckpointing::full, 0, StrategyKind::full_shard, true}}) {
    CAPTURE(variant.name);
    TrainingConfig training;
    training.seq_len = 4096;
    training.checkpointing = variant.checkpointing;
    training.global_batch = variant.global_batch;
    ShardingStrategy strategy;
    strategy.kind = variant.strategy;
    Plan plan = default_plan(model, training, strategy, wrap_per_block(model), cluster.world_size());
    plan.offload.params = plan.offload.optimizer = variant.offload;
    StepSchedule schedule = lower_plan(plan, model, options);
    REQUIRE(schedule.memory_effects != nullptr);
    CHECK(schedule.memory_effects->op_count == schedule.ops.size());
    // The loss's fp32 logits are a larger class than the blocks' tensors: the size-class pool is in use.
    CHECK(schedule.memory_effects->size_classes.size() >= 3);
    CHECK(schedule.memory_effects->pool_has_classes[0]);
    check_walk_equals_plain(schedule, profile);
    // The same schedule without the lowering's table: the walk flattens it itself, with the same result.
    const SimulationSummary with_table = simulate(schedule, profile, false).summary;
    schedule.memory_effects.reset();
    const SimulationSummary without_table = simulate(schedule, profile, false).summary;
    CHECK(with_table.peak_memory_bytes == without_table.peak_memory_bytes);
    CHECK(with_table.reserved_peak_bytes == without_table.reserved_peak_bytes);
    CHECK(with_table.device_peak_bytes == without_table.device_peak_bytes);
    CHECK(with_table.peak_op_id == without_table.peak_op_id);
  }
}

// One stream whose events in op order are not in applies_before's order: an instant that allocates and frees, tied
// with a later instant that only frees (frees apply first at a tie, so the second op's free comes before the first's
// allocation). The walk must notice and sort.
TEST_CASE("memory effects: a stream's tied instants out of order are sorted, as the plain walk does") {
  StepSchedule schedule;
  const auto add = [&](OpKind kind, std::vector<MemoryChange> allocates, std::vector<MemoryChange> frees) {
    Op op;
    op.id = static_cast<int>(schedule.ops.size());
    op.kind = kind;
    op.stream = StreamKind::compute;
    if (op.id > 0) op.deps = {op.id - 1};
    op.allocates = std::move(allocates);
    op.frees = std::move(frees);
    schedule.ops.push_back(op);
  };
  // A 1 ms forward allocates 10 activation bytes and 4 comm-buffer bytes; at 1 ms an instant allocates 3 comm bytes
  // and frees the 10, then another frees the 4. In order at 1 ms: −10, −4, then +3.
  add(OpKind::forward, {{MemoryCategory::activations, 10}, {MemoryCategory::comm_buffers, 4}}, {});
  add(OpKind::wait, {{MemoryCategory::comm_buffers, 3}}, {{MemoryCategory::activations, 10}});
  add(OpKind::free_unsharded, {}, {{MemoryCategory::comm_buffers, 4}});
  HardwareProfile profile = round_profile();
  profile.op_dispatch_overhead_s = 1e-3;
  const SimulationResult simulated = simulate(schedule, profile, true);
  REQUIRE(simulated.timeline.events[1].start_s == simulated.timeline.events[2].start_s);
  check_walk_equals_plain(schedule, profile);
  CHECK(simulated.summary.peak_memory_bytes == 14);
  CHECK(simulated.timeline.memory.back().total_bytes() == 3);
  // With the stream sorted as given, the 3 would be allocated before the 4 were freed: a reserved peak of 17 in the
  // comm-buffer pool's one class; sorted, the freed 4 hold the 3 and reserved stays at the 14 the forward needed.
  CHECK(simulated.summary.reserved_peak_bytes == 14);
}
