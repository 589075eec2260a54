// Tests of lower_rank_program (Note [Rank program] in planner/rank_program.h): each rank's program is the lowering
// the simulator times — lower_plan's schedule for FSDP and TP × FSDP plans, the pipeline rank's own program of
// lower_pipeline for PP × FSDP — its layers and units those of the model it holds, and the executor's check runs
// before the lowering.
#include <doctest/doctest.h>

#include "decoder_builder.h"
#include "errors.h"
#include "lowering.h"
#include "model_presets.h"
#include "pipeline_schedule.h"
#include "rank_program.h"
#include "tensor_parallel_view.h"

using namespace shardplan;

namespace {

ModelSpec tiny_llama() {
  const auto preset = find_model_preset("tiny-llama");
  REQUIRE(preset.has_value());
  return build_decoder(preset->name, preset->architecture, "preset");
}

Plan fsdp_plan(const ModelSpec& model, int data_parallel, int micro_batches) {
  TrainingConfig training;
  training.seq_len = 16;
  training.micro_batch = 2;
  training.global_batch = 2LL * micro_batches * data_parallel;
  training.precision = precision_recipe("fp32");
  training.flash_attention = false;
  return default_plan(model, training, parse_strategy("full_shard"), wrap_per_block(model), data_parallel);
}

// Same ops, in the same order, on the same streams and units.
void check_same_ops(const StepSchedule& got, const StepSchedule& expected) {
  REQUIRE(got.ops.size() == expected.ops.size());
  for (std::size_t at = 0; at < got.ops.size(); ++at) {
    CHECK(got.ops[at].kind == expected.ops[at].kind);
    CHECK(got.ops[at].stream == expected.ops[at].stream);
    CHECK(got.ops[at].unit == expected.ops[at].unit);
    CHECK(got.ops[at].micro_batch == expected.ops[at].micro_batch);
  }
}

}  // namespace

TEST_CASE("rank program: an FSDP plan's program on every rank is the plan lowered over the world") {
  const ModelSpec model = tiny_llama();
  const Plan plan = fsdp_plan(model, 4, 2);
  const ParallelDims dims = parallel_dims(plan, 4);
  const StepSchedule expected = lower_plan(plan, model, {4, 4, 0});
  for (int rank = 0; rank < 4; ++rank) {
    const RankProgram program = lower_rank_program(plan, model, dims, 4, rank);
    CHECK(program.placement.rank == rank);
    check_same_ops(program.schedule, expected);
    CHECK(program.model.layers.size() == model.layers.size());
    CHECK(program.whole_layers.size() == model.layers.size());
    CHECK(program.layouts.size() == plan.units.size());
  }
}

TEST_CASE("rank program: a TP x FSDP rank holds its TP slice and runs the data-parallel group's FSDP program") {
  const ModelSpec model = tiny_llama();
  Plan plan = fsdp_plan(model, 4, 1);
  plan.tensor_parallel_degree = 2;
  validate_plan(plan, model, 4, 4);
  const ParallelDims dims = parallel_dims(plan, 4);
  REQUIRE(dims.tp() == 2);
  const DataParallelView view = data_parallel_view(plan, model, dims, 4);
  const RankProgram program = lower_rank_program(plan, model, dims, 4, 1);
  check_same_ops(program.schedule, lower_plan(plan, model, {4, 4, 0}));
  // The units are laid out over the 2 data-parallel ranks of one TP rank's model.
  CHECK(program.plan.tensor_parallel_degree == 1);
  CHECK(program.model.param_count() == view.model.param_count());
  CHECK(program.model.param_count() < model.param_count());
  const std::vector<UnitLayout> expected = unit_layouts(view.plan, view.model, 2, view.gpus_per_node);
  REQUIRE(program.layouts.size() == expected.size());
  for (std::size_t unit = 0; unit < expected.size(); ++unit) {
    CHECK(program.layouts[unit].param_group == 2);
    CHECK(program.layouts[unit].shard_elements == expected[unit].shard_elements);
  }
}

TEST_CASE("rank program: a PP x FSDP rank runs its pipeline rank's program over its stages' layers") {
  const ModelSpec model = tiny_llama();
  Plan plan = fsdp_plan(model, 2, 4);
  plan.pipeline = default_pipeline(model, 2, PipelineScheduleKind::one_f_one_b, 1);
  validate_plan(plan, model, 4, 4);
  const ParallelDims dims = parallel_dims(plan, 4);
  REQUIRE(dims.pp() == 2);
  const DataParallelView view = data_parallel_view(plan, model, dims, 4);
  const PipelineSchedule pipeline =
      lower_pipeline(view.plan, view.model, {view.world_size(), view.gpus_per_node, 0}, pipeline_layout(plan, dims));
  // Every program carries the world's one ParallelDims, as lower_plan's schedule does.
  for (const StepSchedule& stage_program : pipeline.programs) {
    CHECK(stage_program.parallel.world_size() == 4);
    CHECK(stage_program.parallel.pp() == 2);
    CHECK(stage_program.parallel.data_parallel_world_size() == stage_program.world_size);
  }
  std::size_t layers_held = 0;
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    const RankProgram program = lower_rank_program(plan, model, dims, 4, rank);
    const int pipeline_rank = program.placement.coordinates.pp;
    check_same_ops(program.schedule, pipeline.programs.at(static_cast<std::size_t>(pipeline_rank)));
    CHECK(program.schedule.parallel.pp() == 2);
    CHECK(program.model.layers.size() == program.whole_layers.size());
    CHECK(program.model.layers.size() < model.layers.size());
    if (program.placement.data_parallel_rank == 0) layers_held += program.whole_layers.size();
  }
  CHECK(layers_held == model.layers.size());  // the two pipeline ranks hold every layer once
}

TEST_CASE("rank program: the executor's check sees the units before the lowering runs") {
  const ModelSpec model = tiny_llama();
  const Plan plan = fsdp_plan(model, 2, 1);
  bool checked = false;
  const auto refuse = [&](const RankProgram& held) {
    checked = true;
    CHECK(held.schedule.ops.empty());  // not lowered yet
    CHECK(held.layouts.size() == plan.units.size());
    throw InputError("plan: refused by the executor");
  };
  CHECK_THROWS_WITH_AS(lower_rank_program(plan, model, parallel_dims(plan, 2), 2, 0, refuse),
                       "plan: refused by the executor", InputError);
  CHECK(checked);
}
