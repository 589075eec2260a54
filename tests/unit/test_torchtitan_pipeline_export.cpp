// Tests of the torchtitan export of a pipeline plan: [parallelism] pipeline_parallel_* for torchtitan's split, pp in
// the degrees, module_fqns_per_model_part for any other split or stage count, and the one-line refusal of a schedule
// torchtitan runs with another stage count per rank (Note [Exported pipeline] in planner/export_torchtitan.cpp). With
// SHARDPLAN_TORCHTITAN_PIPELINE_DIR set, the files are written there for tests/exports/check_torchtitan_toml.py to
// check against torchtitan's job config.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "errors.h"
#include "export_torchtitan.h"
#include "model_presets.h"
#include "plan_export.h"

using namespace shardplan;

namespace {

// llama3-8b on 2 x 8 GPUs: pipeline degree 4 over FSDP on the 4 data-parallel ranks, as `simulate
// --pipeline-parallel 4` builds it (cli/cmd_simulate.cpp): default_plan over the data-parallel ranks, then
// default_pipeline; 8 micro-batches of 2 sequences per step.
Plan pipeline_plan(const ModelSpec& model, PipelineScheduleKind schedule, int stages_per_rank) {
  TrainingConfig training;
  training.seq_len = 8192;
  training.micro_batch = 2;
  training.precision = precision_recipe("bf16-mixed-fp32-reduce");
  Plan plan = default_plan(model, training, parse_strategy("full_shard"), wrap_blocks(model, 1), 4);
  plan.grad_accumulation_steps = 8;
  plan.pipeline = default_pipeline(model, 4, schedule, stages_per_rank);
  return plan;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string exported(const Plan& plan, const ModelSpec& model, const std::string& file_name) {
  const auto files = export_plan("torchtitan", plan, model, 16, 8);
  REQUIRE(files.size() == 1);
  if (const char* directory = std::getenv("SHARDPLAN_TORCHTITAN_PIPELINE_DIR")) {
    std::ofstream(std::filesystem::path(directory) / file_name) << files[0].contents;
  }
  return files[0].contents;
}

}  // namespace

TEST_CASE("torchtitan pipeline export: degree, schedule, micro-batch and torchtitan's split") {
  const ModelSpec model = preset_model("llama3-8b");
  const Plan one_f_one_b = pipeline_plan(model, PipelineScheduleKind::one_f_one_b, 1);
  CHECK(torchtitan_degrees(one_f_one_b, 16, 8).pp() == 4);
  CHECK(torchtitan_degrees(one_f_one_b, 16, 8).dp_shard() == 4);
  const std::string toml = exported(one_f_one_b, model, "1F1B.toml");
  // 32 blocks + embedding + head = 34 effective layers: ceil(34 / 9) = 4 stages, torchtitan's [8, 9, 8, 7] blocks.
  for (const char* line : {"local_batch_size = 16\n", "global_batch_size = 64\n", "data_parallel_shard_degree = 4\n",
                           "fsdp_reshard_after_forward = \"default\"\n", "pipeline_parallel_degree = 4\n",
                           "pipeline_parallel_schedule = \"1F1B\"\n", "pipeline_parallel_microbatch_size = 2\n",
                           "pipeline_parallel_layers_per_stage = 9\n"}) {
    CAPTURE(line);
    CHECK(contains(toml, line));
  }
  // 8 stages: no layers_per_stage gives ceil(34 / n) = 8, and 2 per rank is torchtitan's default for looped schedules.
  const std::string interleaved =
      exported(pipeline_plan(model, PipelineScheduleKind::interleaved_1f1b, 2), model, "Interleaved1F1B.toml");
  CHECK(contains(interleaved, "pipeline_parallel_schedule = \"Interleaved1F1B\"\n"));
  CHECK_FALSE(contains(interleaved, "pipeline_parallel_layers_per_stage"));
  const std::string zero_bubble = exported(pipeline_plan(model, PipelineScheduleKind::interleaved_zero_bubble, 3),
                                           model, "InterleavedZeroBubble.toml");
  CHECK(contains(zero_bubble, "pipeline_parallel_schedule = \"InterleavedZeroBubble\"\n"));
  CHECK(contains(zero_bubble, "pipeline_parallel_layers_per_stage = 3\n"));  // ceil(34 / 3) = 12 stages
}

TEST_CASE("torchtitan pipeline export: another split or stage count as module_fqns_per_model_part") {
  const ModelSpec model = preset_model("llama3-8b");
  // torchtitan's [8, 9, 8, 7] blocks with one block moved from stage 1 to stage 0 (as the search's balanced split
  // moves them, Note [Balanced stage split]): every module once, in order, by torchtitan's names.
  Plan moved = pipeline_plan(model, PipelineScheduleKind::one_f_one_b, 1);
  moved.pipeline.stages[0].end += 1;
  moved.pipeline.stages[1].begin += 1;
  const std::string toml = exported(moved, model, "1F1B-moved.toml");
  CHECK_FALSE(contains(toml, "pipeline_parallel_layers_per_stage"));
  std::string expected = "module_fqns_per_model_part = [\n  [\"tok_embeddings\"";
  for (int block = 0; block < 9; ++block) expected += ", \"layers." + std::to_string(block) + "\"";
  expected += "],\n  [\"layers.9\"";
  CHECK(contains(toml, expected));
  CHECK(contains(toml, "\"layers.31\", \"norm\", \"output\"],\n]\n"));
  CHECK(contains(toml, "# Pipeline: 4 stages split as planned (module_fqns_per_model_part)"));
  // 16 stages, 4 per rank: no layers_per_stage gives ceil(34 / n) = 16 and 4 is not the default per rank, so the
  // split is written by name (torchtitan's own split of 16 stages: 34 effective layers, 2 each and 2 more, so stage
  // 0 takes 3 less the embedding).
  const std::string sixteen =
      exported(pipeline_plan(model, PipelineScheduleKind::interleaved_1f1b, 4), model, "Interleaved1F1B-16.toml");
  CHECK(contains(sixteen,
                 "module_fqns_per_model_part = [\n  [\"tok_embeddings\", \"layers.0\", \"layers.1\"],\n"));
  // A single-stage schedule with two stages per rank: torchtitan would run each rank's first stage only.
  CHECK_THROWS_WITH_AS(
      export_torchtitan(pipeline_plan(model, PipelineScheduleKind::one_f_one_b, 2), model, 16, 8),
      doctest::Contains("pipeline schedule 1F1B with 2 stages per rank"), InputError);
}
