// Tests of the simulator's speed-ups that must not change a number: durations priced once per shape (Note [Durations
// by shape]) equal to base_duration_s op by op, the lowering's shared kernels, the memory walk's event order (Note
// [Memory event order]) where instants tie, and the allocator pool's flat classes.
#include <doctest/doctest.h>

#include <set>

#include "caching_allocator.h"
#include "cluster.h"
#include "hardware_catalog.h"
#include "lowering.h"
#include "model_presets.h"
#include "op_durations.h"
#include "op_placement.h"
#include "schedule_fixtures.h"
#include "simulator.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

// llama3-8b on 2 nodes of H100s under knobs that give ops of many shapes: accumulation (zero-filled gradients at
// each unit's first backward), HSDP (all-reduces across replicas), CPU offload (copies, the host optimizer step).
std::vector<StepSchedule> varied_schedules() {
  const ModelSpec model = preset_model("llama3-8b");
  TrainingConfig training;
  training.seq_len = 2048;
  LoweringOptions options;
  options.world_size = 16;
  options.gpus_per_node = 8;
  std::vector<StepSchedule> schedules;
  Plan accumulating = default_plan(model, training, parse_strategy("full_shard"), wrap_per_block(model), 16);
  accumulating.grad_accumulation_steps = 3;
  schedules.push_back(lower_plan(accumulating, model, options));
  schedules.push_back(lower_plan(default_plan(model, training, parse_strategy("hybrid_shard:8"), wrap_blocks(model, 2),
                                              16),
                                 model, options));
  Plan offloaded = default_plan(model, training, parse_strategy("full_shard"), wrap_per_block(model), 16);
  offloaded.offload.params = offloaded.offload.optimizer = true;
  schedules.push_back(lower_plan(offloaded, model, options));
  return schedules;
}

}  // namespace

TEST_CASE("durations by shape: every op's duration and overlap slowdown are base_duration_s's and overlap_slowdown's") {
  const HardwareProfile profile = profile_from_cluster(parse_cluster("2x8xH100-80GB", HardwareCatalog::builtin()));
  for (const StepSchedule& schedule : varied_schedules()) {
    const OpDurations durations = op_durations(schedule, profile);
    REQUIRE(durations.base_s.size() == schedule.ops.size());
    REQUIRE(durations.overlap_slowdown.size() == schedule.ops.size());
    CHECK(base_durations_s(schedule, profile) == durations.base_s);
    std::set<OpKind> kinds;
    for (std::size_t index = 0; index < schedule.ops.size(); ++index) {
      const Op& op = schedule.ops[index];
      kinds.insert(op.kind);
      CHECK(durations.base_s[index] == base_duration_s(op, schedule.compute_element_bytes, profile));
      CHECK(durations.overlap_slowdown[index] == overlap_slowdown(op, schedule.compute_element_bytes, profile));
    }
    CHECK(kinds.size() >= 7);  // gathers, waits, passes, frees, reductions, the optimizer step
  }
}

TEST_CASE("lowering: equal layer passes share one kernels object, so the simulator prices it once") {
  const ModelSpec model = preset_model("llama3-8b");
  TrainingConfig training;
  training.seq_len = 2048;
  training.checkpointing = ActivationCheckpointing::full;
  const Plan plan = default_plan(model, training, parse_strategy("full_shard"), wrap_per_block(model), 8);
  LoweringOptions options;
  options.world_size = 8;
  options.gpus_per_node = 8;
  const StepSchedule schedule = lower_plan(plan, model, options);
  std::set<const PassKernels*> block_forwards, all;
  int passes = 0;
  for (const Op& op : schedule.ops) {
    if (!op.kernels) continue;
    ++passes;
    all.insert(op.kernels.get());
    if (op.kind == OpKind::forward && model.layers[static_cast<std::size_t>(op.layer)].kind == LayerKind::transformer_block) {
      block_forwards.insert(op.kernels.get());
    }
  }
  CHECK(passes > 90);                 // 32 blocks × forward, recompute, backward, and the root's layers
  CHECK(block_forwards.size() == 1);  // 32 equal blocks
  CHECK(all.size() <= 8);             // a block's forward (= its full recompute) and backward, the root's passes
}

TEST_CASE("memory walk: instants that free and allocate at one time apply every free first, then in op order") {
  // Three instants at time 0 on the compute stream over 10 persistent bytes of class 0: op 0 allocates 4, op 1
  // allocates 3 and frees 4, op 2 allocates 2 and frees 3. Frees first (−4, −3), then the allocations in op order
  // (+4, +3, +2): the peak is 12, reached by op 2; op by op it would be 17.
  StepSchedule schedule;
  schedule.persistent[static_cast<std::size_t>(MemoryCategory::activations)] = 10;
  const std::vector<std::pair<std::int64_t, std::int64_t>> changes = {{4, 0}, {3, 4}, {2, 3}};
  for (const auto& [allocated, freed] : changes) {
    Op op;
    op.id = static_cast<int>(schedule.ops.size());
    op.kind = OpKind::wait;
    op.allocates = {{MemoryCategory::activations, allocated}};
    if (freed > 0) op.frees = {{MemoryCategory::activations, freed}};
    schedule.ops.push_back(op);
  }
  for (const bool timeline : {false, true}) {
    const SimulationResult result = simulate(schedule, round_profile(), timeline);
    CHECK(result.summary.peak_memory_bytes == 12);
    CHECK(result.summary.peak_op_id == 2);
    CHECK(result.summary.reserved_peak_bytes == 12);
  }
}

TEST_CASE("size classes: a class met between others shifts where the later classes' bytes were placed") {
  SizeClassPool pool;
  pool.allocate(10, 100);
  pool.allocate(4, 1);    // a new class below 100, its own segments: 14 reserved
  pool.free(10, 100);     // back to class 100's region, now second in the pool
  pool.allocate(10, 50);  // between them: fits class 100's free 10
  CHECK(pool.reserved_bytes() == 14);
  CHECK(pool.allocated_bytes() == 14);
  pool.free(4, 1);
  pool.allocate(4, 1);  // class 1's own freed 4
  CHECK(pool.reserved_bytes() == 14);
}
