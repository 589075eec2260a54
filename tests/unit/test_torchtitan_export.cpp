// Tests of the torchtitan export: the job config's fields for a plan torchtitan can run, its degrees, and the
// one-line refusals for what torchtitan cannot say (Note [What torchtitan runs] in planner/export_torchtitan.cpp).
#include <doctest/doctest.h>

#include <string>

#include "errors.h"
#include "export_torchtitan.h"
#include "model_presets.h"
#include "plan_export.h"

using namespace shardplan;

namespace {

// llama3-8b with torchtitan's precision (fp32 reduce), one unit per block, as restrict_search_to_torchtitan searches.
Plan torchtitan_plan(const ModelSpec& model, std::size_t blocks_per_unit = 1, const std::string& strategy = "full_shard",
                     int world = 8) {
  TrainingConfig training;
  training.seq_len = 8192;
  training.precision = precision_recipe("bf16-mixed-fp32-reduce");
  return default_plan(model, training, parse_strategy(strategy), wrap_blocks(model, blocks_per_unit), world);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("torchtitan export: a one-unit-per-block FSDP plan becomes torchtitan's job config") {
  const ModelSpec model = preset_model("llama3-8b");
  const auto files = export_plan("torchtitan", torchtitan_plan(model), model, 8, 8);
  REQUIRE(files.size() == 1);
  CHECK(files[0].file_name == "torchtitan_job.toml");
  const std::string& toml = files[0].contents;
  for (const char* line : {"[model]\nname = \"llama3\"\nflavor = \"8B\"\n", "local_batch_size = 1\n",
                           "global_batch_size = 8\n", "seq_len = 8192\n", "mixed_precision_reduce = \"float32\"\n",
                           "data_parallel_replicate_degree = 1\n", "data_parallel_shard_degree = 8\n",
                           "fsdp_reshard_after_forward = \"default\"\n", "tensor_parallel_degree = 1\n",
                           "pipeline_parallel_degree = 1\n", "context_parallel_degree = 1\n",
                           "[activation_checkpoint]\nmode = \"none\"\n", "[compile]\nenable = false\n"}) {
    CAPTURE(line);
    CHECK(contains(toml, line));
  }
  CHECK_FALSE(contains(toml, "[quantize"));
}

TEST_CASE("torchtitan export: degrees multiply to the world for FSDP, HSDP, TP and DDP") {
  const ModelSpec model = preset_model("llama3-8b");
  const ParallelDims hsdp = torchtitan_degrees(torchtitan_plan(model, 1, "hybrid_shard", 16), 16, 8);
  CHECK(hsdp.dp_replicate() == 2);
  CHECK(hsdp.dp_shard() == 8);
  CHECK(hsdp.world_size() == 16);
  Plan tp = torchtitan_plan(model, 1, "full_shard", 8);
  tp.tensor_parallel_degree = 2;
  const ParallelDims tp_degrees = torchtitan_degrees(tp, 8, 8);
  CHECK(tp_degrees.tp() == 2);
  CHECK(tp_degrees.dp_shard() == 4);
  CHECK(tp_degrees.cp() == 1);
  CHECK(tp_degrees.pp() == 1);
  const ParallelDims ddp = torchtitan_degrees(torchtitan_plan(model, 1, "no_shard"), 8, 8);
  CHECK(ddp.dp_replicate() == 8);
  CHECK(ddp.dp_shard() == 1);
  CHECK(contains(export_torchtitan(torchtitan_plan(model, 1, "shard_grad_op"), model, 8, 8).contents,
                 "fsdp_reshard_after_forward = \"never\"\n"));
}

TEST_CASE("torchtitan export: checkpointing on every block, every k-th block, or refused") {
  const ModelSpec model = preset_model("llama3-8b");
  Plan plan = torchtitan_plan(model);
  std::size_t block = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind != LayerKind::transformer_block) continue;
    plan.layer_checkpointing[layer] = (++block % 3 == 0) ? ActivationCheckpointing::full : ActivationCheckpointing::none;
  }
  const std::string every_third = export_torchtitan(plan, model, 8, 8).contents;
  CHECK(contains(every_third, "mode = \"selective\"\nselective_ac_option = \"3\"\n"));
  // Full AC on the first half of the blocks: no torchtitan option says that.
  block = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind != LayerKind::transformer_block) continue;
    plan.layer_checkpointing[layer] = (block++ < 16) ? ActivationCheckpointing::full : ActivationCheckpointing::none;
  }
  CHECK_THROWS_WITH_AS(export_torchtitan(plan, model, 8, 8), doctest::Contains("every k-th block"), InputError);
  for (auto& mode : plan.layer_checkpointing) mode = ActivationCheckpointing::none;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind == LayerKind::transformer_block) {
      plan.layer_checkpointing[layer] = ActivationCheckpointing::selective_op;
    }
  }
  CHECK(contains(export_torchtitan(plan, model, 8, 8).contents, "selective_ac_option = \"op\"\n"));
}

TEST_CASE("torchtitan export: what torchtitan cannot say is refused in one line, not dropped") {
  const ModelSpec model = preset_model("llama3-8b");
  CHECK_THROWS_WITH_AS(export_torchtitan(torchtitan_plan(model, 2), model, 8, 8),
                       doctest::Contains("exactly one transformer block per FSDP unit"), InputError);
  Plan mixed = torchtitan_plan(model);
  mixed.units.back().reshard_after_forward.enabled = false;
  CHECK_THROWS_WITH_AS(export_torchtitan(mixed, model, 8, 8), doctest::Contains("one fsdp_reshard_after_forward"),
                       InputError);
  Plan partial = torchtitan_plan(model);
  partial.units[1].reshard_after_forward.group_size = 2;
  CHECK_THROWS_WITH_AS(export_torchtitan(partial, model, 8, 8), doctest::Contains("reshards to groups of 2"),
                       InputError);
  Plan deep = torchtitan_plan(model);
  deep.units[1].forward_prefetch = {2, 3};
  CHECK_THROWS_WITH_AS(export_torchtitan(deep, model, 8, 8), doctest::Contains("implicit one-ahead prefetch"),
                       InputError);
  Plan optimizer_only = torchtitan_plan(model);
  optimizer_only.offload.optimizer = true;
  CHECK_THROWS_WITH_AS(export_torchtitan(optimizer_only, model, 8, 8), doctest::Contains("optimizer states alone"),
                       InputError);
  Plan bf16_reduce = torchtitan_plan(model);
  bf16_reduce.training.precision = precision_recipe("bf16-mixed");
  CHECK_THROWS_WITH_AS(export_torchtitan(bf16_reduce, model, 8, 8), doctest::Contains("float32 only"), InputError);
  const ModelSpec tiny = preset_model("tiny-llama");
  Plan tiny_plan = torchtitan_plan(tiny);
  tiny_plan.training.seq_len = 256;  // within its positions: the model, not the sequence, is refused
  CHECK_THROWS_WITH_AS(export_torchtitan(tiny_plan, tiny, 8, 8),
                       doctest::Contains("not one torchtitan defines"), InputError);
  CHECK_THROWS_WITH_AS(export_torchtitan(torchtitan_plan(model, 1, "zero2"), model, 8, 8),
                       doctest::Contains("FSDP2 and torchtitan cannot"), InputError);
}
