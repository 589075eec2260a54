// Tests of what the exports can express: one root device mesh in the FSDP2 script, full-length rotary positions under
// sequence parallelism, and plans the format cannot write (EP, TP outside fsdp2, pipelines outside torchtitan) refused
// or kept out of the search.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "errors.h"
#include "export_tables.h"
#include "hf_example_models.h"
#include "model_presets.h"
#include "plan_export.h"

using namespace shardplan;
using shardplan::testing::compile_and_read;
using shardplan::testing::hf_model;

namespace {

Plan plan_for(const ModelSpec& model, int world, const std::string& strategy = "full_shard") {
  TrainingConfig training;
  training.seq_len = 256;
  return default_plan(model, training, parse_strategy(strategy), wrap_per_block(model), world);
}

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t found = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++found;
  return found;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("export: a TP x FSDP plan builds one root mesh and slices it for TP and for FSDP (Note [One root mesh])") {
  const ModelSpec model = preset_model("llama3-8b");
  Plan plan = plan_for(model, 8);
  plan.tensor_parallel_degree = 2;
  const auto file = export_fsdp2(plan, model, 8, 8);
  const std::string& py = file.contents;
  // Two init_device_mesh calls (("dp", "tp") and ("shard", "tp")) were two roots; fully_shard refuses a TP parameter
  // whose DP mesh has another parent.
  CHECK(count(py, "init_device_mesh(device_type") == 1);
  CHECK(contains(py, "mesh = init_device_mesh(device_type, (4, 2), mesh_dim_names=(\"dp_shard\", \"tp\"))"));
  CHECK(contains(py, "dp_mesh = mesh[\"dp_shard\"]"));
  CHECK(contains(py, "_apply_tensor_parallel(model, mesh[\"tp\"])"));
  CHECK(contains(py, "fully_shard(model, mesh=dp_mesh,"));
  // transformers PR #32597: LlamaModel gets full-length position_ids, so rotary cos/sin cover the whole sequence.
  CHECK(contains(py, "model.get_submodule(\"model\").register_forward_pre_hook(_full_length_positions, "
                     "with_kwargs=True)"));
  CHECK(contains(py, "torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)"));
  compile_and_read(file);

  // FSDP2 cannot reshard to a smaller mesh after forward with TP ("Resharding to smaller mesh with TP is not supported
  // yet", _fsdp_param.py): a plan keeping a partial copy is refused rather than written.
  Plan partial = plan;
  partial.units[2].reshard_after_forward.group_size = 2;
  CHECK_THROWS_WITH_AS(export_fsdp2(partial, model, 8, 8),
                       doctest::Contains("which FSDP2 cannot do with tensor parallelism"), InputError);

  // float8 tensorwise: the blocks take torchao's float8 styles, as torchtitan's apply_tp does.
  plan.training.precision = precision_recipe("fp8-tensorwise");
  const std::string fp8 = export_fsdp2(plan, model, 8, 8).contents;
  CHECK(contains(fp8, "block_colwise, block_rowwise, block_prepare = Float8ColwiseParallel, Float8RowwiseParallel"));
}

TEST_CASE("export: units of different layouts share the root mesh; layouts no one mesh holds are refused") {
  const ModelSpec model = preset_model("tiny-llama");
  Plan plan = plan_for(model, 16, "hybrid_shard");
  plan.units[1].strategy = parse_strategy("full_shard");
  const std::string py = export_fsdp2(plan, model, 16, 8).contents;
  CHECK(count(py, "init_device_mesh(device_type") == 1);
  CHECK(contains(py, "mesh = init_device_mesh(device_type, (2, 8), mesh_dim_names=(\"dp_replicate\", \"dp_shard\"))"));
  CHECK(contains(py, "dp_mesh = mesh[\"dp_replicate\", \"dp_shard\"]._flatten(\"dp\")"));
  CHECK(contains(py, "hsdp_mesh = mesh[\"dp_replicate\", \"dp_shard\"]\n"));
  CHECK(contains(py, "fully_shard(model.model.layers[0], mesh=dp_mesh,"));
  CHECK(contains(py, "fully_shard(model.model.layers[1], mesh=hsdp_mesh,"));

  plan.units[1].strategy = parse_strategy("hybrid_shard:4");  // 4 x 4 beside the others' 2 x 8
  CHECK_THROWS_WITH_AS(export_fsdp2(plan, model, 16, 8),
                       doctest::Contains("slices of one root mesh (expected one hybrid group size per plan)"),
                       InputError);
}

TEST_CASE("export: a plan the format cannot write is refused by every exporter in one line") {
  const ModelSpec mixtral = hf_model("mixtral-8x7b");
  Plan expert_parallel = plan_for(mixtral, 16);
  expert_parallel.training.expert_parallel_degree = 8;
  for (const std::string format : {"fsdp2", "fsdp1", "deepspeed"}) {
    CAPTURE(format);
    const std::string expected = "--export " + format + ": the plan has expert_parallel_degree 8";
    CHECK_THROWS_WITH_AS(export_plan(format, expert_parallel, mixtral, 16, 8), doctest::Contains(expected.c_str()),
                         InputError);
  }
  const ModelSpec llama = preset_model("tiny-llama");
  Plan two_d = plan_for(llama, 8);
  two_d.tensor_parallel_degree = 2;
  CHECK_THROWS_WITH_AS(export_fsdp1(two_d, llama, 8, 8), doctest::Contains("FSDP1 has no tensor parallelism"),
                       InputError);
  CHECK_THROWS_WITH_AS(export_deepspeed(two_d, llama, 8, 8), doctest::Contains("expected --export fsdp2"), InputError);
}

TEST_CASE("export: a pipeline plan is refused in one line by every export but torchtitan's") {
  const ModelSpec llama = preset_model("tiny-llama");
  Plan pipelined = plan_for(llama, 4);
  pipelined.pipeline = default_pipeline(llama, 2, PipelineScheduleKind::one_f_one_b, 1);
  for (const std::string format : {"fsdp2", "fsdp1", "deepspeed"}) {
    CAPTURE(format);
    const std::string expected = "--export " + format + ": the plan has a pipeline (pipeline_parallel_degree 2), but ";
    CHECK_THROWS_WITH_AS(export_plan(format, pipelined, llama, 8, 8), doctest::Contains(expected.c_str()), InputError);
  }
  CHECK_THROWS_WITH_AS(export_plan("fsdp2", pipelined, llama, 8, 8),
                       doctest::Contains("the FSDP2 script does not build torch.distributed.pipelining stages yet"),
                       InputError);
}

TEST_CASE("export support: the search keeps only the degrees the format writes; a pinned one it cannot is refused") {
  const ModelSpec llama = preset_model("llama3-8b");
  const ModelSpec mixtral = hf_model("mixtral-8x7b");
  const TrainingConfig training;
  CHECK(export_support("fsdp2", llama, training).tensor_parallel);
  CHECK_FALSE(export_support("fsdp2", llama, training).expert_parallel);
  CHECK_FALSE(export_support("fsdp1", llama, training).tensor_parallel);
  CHECK_FALSE(export_support("deepspeed", llama, training).tensor_parallel);
  TrainingConfig lora = training;
  lora.finetune.mode = FinetuneMode::lora;
  CHECK_FALSE(export_support("fsdp2", llama, lora).tensor_parallel);

  std::vector<int> tp = {1, 2, 4, 8}, ep = {1, 2, 4, 8};
  restrict_search_to_export("fsdp2", mixtral, training, false, tp, ep);
  CHECK(ep == std::vector<int>{1});
  tp = {1, 2, 4, 8};
  restrict_search_to_export("fsdp2", llama, training, false, tp, ep);
  CHECK(tp == std::vector<int>{1, 2, 4, 8});
  tp = {1, 2, 4, 8};
  restrict_search_to_export("fsdp1", llama, training, false, tp, ep);
  CHECK(tp == std::vector<int>{1});

  tp = {2};
  CHECK_THROWS_WITH_AS(restrict_search_to_export("fsdp1", llama, training, true, tp, ep),
                       doctest::Contains("--tensor-parallel 2 with --export fsdp1"), InputError);
  TrainingConfig pinned_ep = training;
  pinned_ep.expert_parallel_degree = 8;
  tp = {1};
  CHECK_THROWS_WITH_AS(restrict_search_to_export("fsdp2", mixtral, pinned_ep, false, tp, ep),
                       doctest::Contains("--expert-parallel 8 with --export fsdp2"), InputError);
}
