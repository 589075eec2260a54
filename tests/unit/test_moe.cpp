// Tests of mixture-of-experts models: the MoE and Qwen3 configs' exact parameter counts and module paths, FSDP's
// all-gathers carrying every expert, expert parallelism's layouts, all-to-alls, plan JSON and search.
#include <doctest/doctest.h>

#include <string>

#include "cluster.h"
#include "decoder_builder.h"
#include "errors.h"
#include "finetune_apply.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "hf_config.h"
#include "hf_example_models.h"
#include "json_input.h"
#include "lowering.h"
#include "plan_json.h"
#include "search.h"
#include "simulator.h"
#include "unit_layout.h"

using namespace shardplan;
using shardplan::testing::hf_model;

namespace {

const TensorSpec* find_tensor(const LayerSpec& layer, const std::string& name) {
  for (const auto& tensor : layer.tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

TrainingConfig mixtral_training(int expert_parallel) {
  TrainingConfig training;
  training.seq_len = 4096;
  training.checkpointing = ActivationCheckpointing::full;
  training.expert_parallel_degree = expert_parallel;
  return training;
}

Plan per_block_plan(const ModelSpec& model, const TrainingConfig& training, int world) {
  return default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), world);
}

StepSchedule lower_on_one_node(const Plan& plan, const ModelSpec& model, int world) {
  LoweringOptions options;
  options.world_size = world;
  options.gpus_per_node = 8;
  return lower_plan(plan, model, options);
}

std::int64_t bytes_of(const StepSchedule& schedule, OpKind kind) {
  std::int64_t total = 0;
  for (const Op& op : schedule.ops) total += op.kind == kind ? op.bytes : 0;
  return total;
}

// Every block's parameters (experts included) and the root's, as the per-block plan's units hold them.
struct UnitSums {
  std::int64_t blocks = 0;
  std::int64_t routed_experts = 0;
  std::int64_t root = 0;
};
UnitSums unit_sums(const ModelSpec& model) {
  UnitSums sums;
  for (const LayerSpec& layer : model.layers) {
    if (layer.kind == LayerKind::transformer_block) {
      sums.blocks += layer.param_count();
      sums.routed_experts += layer.moe ? layer.moe->routed_expert_elements : 0;
    } else {
      sums.root += layer.param_count();
    }
  }
  return sums;
}

}  // namespace

TEST_CASE("moe: shipped MoE and Qwen3 configs build models with the published exact parameter counts") {
  // mistralai/Mixtral-8x7B-v0.1 model.safetensors.index.json: "total_size": 93405585408 bytes of bf16 = 46.7B
  // (model card: "46.7B total parameters").
  CHECK(hf_model("mixtral-8x7b").param_count() == 93'405'585'408 / 2);
  // Qwen/Qwen3-30B-A3B model.safetensors.index.json: "total_size": 61064245248 bytes of bf16 (model card: 30.5B).
  CHECK(hf_model("qwen3-30b-a3b").param_count() == 61'064'245'248 / 2);
  // Qwen/Qwen3-8B model card: "Number of Parameters: 8.2B, Non-Embedding: 6.95B"; the HF API's safetensors total is
  // 8190735360 (as clients and GGUF metadata, n_params, record it); untied, 151936 × 4096 twice.
  const ModelSpec qwen3 = hf_model("qwen3-8b");
  CHECK(qwen3.param_count() == 8'190'735'360);
  CHECK(qwen3.param_count() - 2 * 151'936 * 4'096 == 6'946'075'648);
  // Qwen/Qwen1.5-MoE-A2.7B model card: "14.3B parameters in total and 2.7B activated parameters"; exactly
  // 14,315,784,192 in keras-team/keras-hub keras_hub/src/models/qwen_moe/qwen_moe_presets.py ("params").
  CHECK(hf_model("qwen1.5-moe-a2.7b").param_count() == 14'315'784'192);
}

TEST_CASE("moe: Mixtral's experts sit under the transformers module paths, with routing and top-2 FLOPs") {
  const ModelSpec model = hf_model("mixtral-8x7b");
  const LayerSpec& block = model.layers[4];  // model.embed_tokens is layer 0
  CHECK(block.name == "model.layers.3");
  REQUIRE(find_tensor(block, "block_sparse_moe.gate.weight") != nullptr);
  CHECK(find_tensor(block, "block_sparse_moe.gate.weight")->shape == std::vector<std::int64_t>{8, 4096});
  REQUIRE(find_tensor(block, "block_sparse_moe.experts.7.w2.weight") != nullptr);
  CHECK(find_tensor(block, "block_sparse_moe.experts.7.w2.weight")->shape == std::vector<std::int64_t>{4096, 14336});
  CHECK(find_tensor(block, "mlp.gate_proj.weight") == nullptr);
  REQUIRE(block.moe);
  CHECK(block.moe->num_experts == 8);
  CHECK(block.moe->experts_per_token == 2);
  CHECK(block.moe->capacity_factor == 1.0);
  CHECK(block.moe->routed_expert_elements == 8LL * 3 * 4096 * 14336);
  // Model FLOPs per token: attention projections, the router and two of the eight experts.
  const double attention = 2.0 * 4096 * 4096 + 2.0 * 4096 * 1024;
  CHECK(block.flops.matmul_flops_per_token == doctest::Approx(2.0 * (attention + 4096.0 * 8 + 2.0 * 3 * 4096 * 14336)));
  // The kernels' GEMMs do the same work (dropless: capacity factor 1).
  double kernel_flops = 0;
  for (const auto& projection : block.kernels->projections) {
    kernel_flops += 2.0 * static_cast<double>(projection.in_features * projection.out_features);
  }
  CHECK(kernel_flops == doctest::Approx(block.flops.matmul_flops_per_token));
}

TEST_CASE("moe: Qwen3's head_dim apart from hidden / heads, q/k norms; Qwen2-MoE's shared expert and gate") {
  const ModelSpec qwen3_moe = hf_model("qwen3-30b-a3b");
  const LayerSpec& block = qwen3_moe.layers[1];
  CHECK(find_tensor(block, "self_attn.q_proj.weight")->shape == std::vector<std::int64_t>{32 * 128, 2048});
  CHECK(find_tensor(block, "self_attn.o_proj.weight")->shape == std::vector<std::int64_t>{2048, 32 * 128});
  CHECK(find_tensor(block, "self_attn.k_norm.weight")->shape == std::vector<std::int64_t>{128});
  CHECK(find_tensor(block, "mlp.experts.127.down_proj.weight")->shape == std::vector<std::int64_t>{2048, 768});
  CHECK(block.kernels->attention->head_dim == 128);

  const ModelSpec qwen2_moe = hf_model("qwen1.5-moe-a2.7b");
  const LayerSpec& shared = qwen2_moe.layers[1];
  CHECK(find_tensor(shared, "mlp.shared_expert.up_proj.weight")->shape == std::vector<std::int64_t>{5632, 2048});
  CHECK(find_tensor(shared, "mlp.shared_expert_gate.weight")->shape == std::vector<std::int64_t>{1, 2048});
  CHECK(find_tensor(shared, "self_attn.q_proj.bias") != nullptr);
  CHECK(shared.moe->routed_expert_elements == 60LL * 3 * 2048 * 1408);  // the shared expert is not routed
}

TEST_CASE("moe: unsupported MoE settings are refused by name") {
  auto config = read_json_file("examples/hf/mixtral-8x7b.json");
  config["num_experts_per_tok"] = 9;
  CHECK_THROWS_WITH_AS(architecture_from_hf_config(config, "m.json"), doctest::Contains("'num_experts_per_tok'"),
                       InputError);
  auto qwen = read_json_file("examples/hf/qwen3-30b-a3b.json");
  qwen["mlp_only_layers"] = nlohmann::json::array({0});
  CHECK_THROWS_WITH_AS(architecture_from_hf_config(qwen, "q.json"), doctest::Contains("'mlp_only_layers'"), InputError);
}

// Must-show 3 of issue 17: under FSDP alone, every expert is sharded and gathered with its block.
TEST_CASE("moe: Mixtral-8x7B on 8 ranks, FSDP alone: the all-gathers carry every parameter, all 8 experts included") {
  const ModelSpec model = hf_model("mixtral-8x7b");
  const UnitSums sums = unit_sums(model);
  REQUIRE(sums.blocks + sums.root == 46'702'792'704);
  CHECK(sums.routed_experts == 32LL * 8 * 3 * 4096 * 14336);
  const TrainingConfig training = mixtral_training(1);
  const StepSchedule schedule = lower_on_one_node(per_block_plan(model, training, 8), model, 8);
  // Every block unit is gathered twice per step (forward, and again for backward: resharded after forward); the root
  // once (kept gathered). Units divide by 8, so no padding: 2 bytes (bf16) × elements × gathers.
  CHECK(schedule.count(OpKind::all_gather) == 2 * 32 + 1);
  CHECK(bytes_of(schedule, OpKind::all_gather) == 2 * (2 * sums.blocks + sums.root));
  CHECK(schedule.count(OpKind::all_to_all) == 0);
  // The reduce-scatters carry every gradient once, in bf16.
  CHECK(bytes_of(schedule, OpKind::reduce_scatter) == 2 * (sums.blocks + sums.root));
}

TEST_CASE("moe: expert parallelism gathers 1/EP of the experts and exchanges the routed tokens by all-to-all") {
  const ModelSpec model = hf_model("mixtral-8x7b");
  const UnitSums sums = unit_sums(model);
  for (const int degree : {2, 4, 8}) {
    CAPTURE(degree);
    const TrainingConfig training = mixtral_training(degree);
    const Plan plan = per_block_plan(model, training, 8);
    const StepSchedule schedule = lower_on_one_node(plan, model, 8);
    const std::int64_t remote = sums.routed_experts - sums.routed_experts / degree;
    CHECK(bytes_of(schedule, OpKind::all_gather) == 2 * (2 * (sums.blocks - remote) + sums.root));
    CHECK(bytes_of(schedule, OpKind::reduce_scatter) == 2 * (sums.blocks - remote + sums.root));
    // Shards are what FSDP alone gives: every parameter over the 8 ranks.
    const auto layouts = unit_layouts(plan, model, 8, 8);
    const auto alone = unit_layouts(per_block_plan(model, mixtral_training(1), 8), model, 8, 8);
    CHECK(layouts[1].shard_bytes == alone[1].shard_bytes);
    CHECK(layouts[1].gathered_bytes == alone[1].gathered_bytes - 2 * model.layers[1].moe->routed_expert_elements *
                                                                      (degree - 1) / degree);
    // Per block: dispatch and combine in forward, in the full recompute and in backward; each carries every token's
    // top-2 hidden vectors in bf16.
    CHECK(schedule.count(OpKind::all_to_all) == 32 * 2 * 3);
    for (const Op& op : schedule.ops) {
      if (op.kind != OpKind::all_to_all) continue;
      CHECK(op.bytes == 4096LL * 2 * 4096 * 2);
      CHECK(op.group == GroupKind::expert);
      CHECK(op.group_size == degree);
      CHECK(op.stream == StreamKind::all_to_all);
    }
    // The simulator times them and counts them among the step's collectives.
    const SimulationResult simulated = simulate(schedule, profile_from_cluster(parse_cluster("8xH100-80GB",
                                                                              HardwareCatalog::builtin())));
    bool timed = false;
    for (const auto& totals : simulated.summary.collectives) {
      if (totals.kind == "all_to_all") timed = totals.count == 32 * 2 * 3 && totals.busy_s > 0;
    }
    CHECK(timed);
  }
}

TEST_CASE("moe: the expert-parallel degree round-trips through plan JSON and is checked against the model") {
  const ModelSpec model = hf_model("mixtral-8x7b");
  const Plan plan = per_block_plan(model, mixtral_training(4), 8);
  const nlohmann::json document = to_json(plan, model);
  CHECK(document["training"]["expert_parallel_degree"] == 4);
  CHECK(plan_from_json(document, "p.json", model).training.expert_parallel_degree == 4);
  // Plans without expert parallelism write no key (older plans read and write as before).
  CHECK_FALSE(to_json(per_block_plan(model, mixtral_training(1), 8), model)["training"].contains(
      "expert_parallel_degree"));

  nlohmann::json three = document;
  three["training"]["expert_parallel_degree"] = 3;  // 8 experts
  CHECK_THROWS_WITH_AS(validate_plan(plan_from_json(three, "p.json", model), model, 8, 8),
                       doctest::Contains("divisor of the 8 experts"), InputError);
  // The group must divide the world: 8 experts over groups of 8 ranks, in a world of 4.
  CHECK_THROWS_WITH_AS(validate_plan(per_block_plan(model, mixtral_training(8), 4), model, 4, 4),
                       doctest::Contains("expected a divisor of the 4 ranks"), InputError);
  const ModelSpec dense = hf_model("qwen3-8b");
  TrainingConfig training = mixtral_training(2);
  CHECK_THROWS_WITH_AS(validate_training(training, dense), doctest::Contains("the model has no experts"), InputError);
}

TEST_CASE("moe: the planner searches the expert-parallel degree only for models with experts") {
  const Cluster cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  CHECK(expert_parallel_candidates(hf_model("mixtral-8x7b"), cluster) == std::vector<int>{1, 2, 4, 8});
  CHECK(expert_parallel_candidates(hf_model("qwen3-8b"), cluster) == std::vector<int>{1});
  // Qwen1.5-MoE's 60 experts: 2 and 4 divide them, 8 does not.
  CHECK(expert_parallel_candidates(hf_model("qwen1.5-moe-a2.7b"), cluster) == std::vector<int>{1, 2, 4});
  // Fine-tuning takes no expert parallelism (validate_expert_parallel): the search keeps to 1 rather than fail on 2.
  FinetuneConfig lora;
  lora.mode = FinetuneMode::lora;
  const ModelSpec tuned = finetuned_model(hf_model("mixtral-8x7b"), lora, FinetuneFieldNames::cli());
  CHECK(expert_parallel_candidates(tuned, cluster) == std::vector<int>{1});
}
