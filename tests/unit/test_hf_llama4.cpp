// Tests of the Llama 4 import (issue 35): Scout's and Maverick's exact counts against the released checkpoints'
// stored totals, the MoE block with its shared expert and stacked experts under the released names, dense and MoE
// layers interleaved, the vision encoder and adapter, and the one-line refusals.
#include <doctest/doctest.h>

#include <string>

#include "errors.h"
#include "hf_example_models.h"
#include "json_input.h"
#include "model_source.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

const std::string kScout = "examples/hf/llama4-scout-17b-16e.json";

// meta-llama/Llama-4-Maverick-17B-128E's shape as its config differs from Scout's: 128 experts, MoE on every other
// layer (interleave_moe_layer_step 2: layers 1, 3, ..., 47), no qk norm; the same vision tower.
nlohmann::json maverick() {
  nlohmann::json document = read_json_file(kScout);
  auto& text = document["text_config"];
  text["num_local_experts"] = 128;
  text["interleave_moe_layer_step"] = 2;
  text["use_qk_norm"] = false;
  text["moe_layers"] = nlohmann::json::array();
  for (int i = 1; i < 48; i += 2) text["moe_layers"].push_back(i);
  return document;
}

}  // namespace

TEST_CASE("hf Llama 4: Scout's MoE decoder with a shared expert, its vision encoder, the released exact count") {
  // meta-llama/Llama-4-Scout-17B-16E(-Instruct): 108,641,793,536 parameters (the Hub's safetensors count, in public
  // model-size tables): the text model 107,769,861,120 (48 MoE layers of 16 experts of 8192 and a shared expert,
  // the 202048 × 5120 embedding and untied head) and the vision side 871,932,416 (34 encoder layers of 1408, the
  // pixel-shuffle adapter, the projector 4096 × 5120).
  const ModelSpec scout = load_model(kScout);
  CHECK(scout.param_count() == 108'641'793'536);
  CHECK(params_under(scout, "language_model.") == 107'769'861'120);
  CHECK(params_under(scout, "vision_model") + params_under(scout, "multi_modal_projector") == 871'932'416);
  CHECK(scout.layers[0].name == "language_model.model.embed_tokens");
  CHECK(scout.layers.back().name == "language_model.lm_head");
  const LayerSpec& block = layer_named(scout, "language_model.model.layers.0");
  CHECK(has_tensor(block, "feed_forward.router.weight", {16, 5120}));
  CHECK(has_tensor(block, "feed_forward.experts.gate_up_proj", {16, 5120, 16384}));
  CHECK(has_tensor(block, "feed_forward.experts.down_proj", {16, 8192, 5120}));
  CHECK(has_tensor(block, "feed_forward.shared_expert.gate_proj.weight", {8192, 5120}));
  CHECK(has_tensor(block, "self_attn.q_proj.weight", {5120, 5120}));
  CHECK(has_tensor(block, "self_attn.k_proj.weight", {1024, 5120}));
  CHECK(block.tensors.size() == 12);  // 4 attention, router, 2 stacked experts, 3 shared, 2 norms
  REQUIRE(block.moe);
  CHECK(block.moe->num_experts == 16);
  CHECK(block.moe->experts_per_token == 1);
  CHECK(block.moe->routed_expert_elements == 16 * 3 * 5120 * 8192);
  // Per token: one routed expert and the shared one, each a SwiGLU of 8192, and the router.
  const double attention_matmuls = 2.0 * (2 * 5120.0 * 5120 + 2 * 1024.0 * 5120);
  CHECK(block.flops.matmul_flops_per_token ==
        doctest::Approx(attention_matmuls + 2.0 * 3 * 5120.0 * 8192 * 2 + 2.0 * 5120 * 16));
  const LayerSpec& encoder = layer_named(scout, "vision_model.model.layers.0");
  CHECK(has_tensor(encoder, "self_attn.q_proj.bias", {1408}));
  CHECK(has_tensor(encoder, "mlp.fc1.weight", {5632, 1408}));
  CHECK(encoder.tokens_per_sample(8192) == 577);  // a 336² tile: 24 × 24 patches and the class token
  CHECK(layer_named(scout, "vision_model.vision_adapter").tokens_per_sample(8192) == 144);  // pixel shuffle 0.5
  CHECK(has_tensor(layer_named(scout, "multi_modal_projector"), "linear_1.weight", {5120, 4096}));
}

TEST_CASE("hf Llama 4: Maverick interleaves dense layers of intermediate_size_mlp with 128-expert MoE layers") {
  // meta-llama/Llama-4-Maverick-17B-128E(-Instruct): 401,583,781,376 parameters (the count public model registries
  // give the released checkpoint): 24 MoE layers of 128 experts, 24 dense SwiGLU layers of 16384.
  const ModelSpec model = config_model(maverick());
  CHECK(model.param_count() == 401'583'781'376);
  const LayerSpec& dense = layer_named(model, "language_model.model.layers.0");
  const LayerSpec& sparse = layer_named(model, "language_model.model.layers.1");
  CHECK(has_tensor(dense, "feed_forward.gate_proj.weight", {16384, 5120}));
  CHECK_FALSE(dense.moe);
  CHECK(has_tensor(sparse, "feed_forward.experts.gate_up_proj", {128, 5120, 16384}));
  REQUIRE(sparse.moe);
  CHECK(sparse.moe->num_experts == 128);

  // The text class alone (Llama4ForCausalLM, a text_config saved on its own): no language_model. prefix, no vision.
  nlohmann::json text = read_json_file(kScout)["text_config"];
  text["architectures"] = {"Llama4ForCausalLM"};
  const ModelSpec text_only = config_model(text);
  CHECK(text_only.param_count() == 107'769'861'120);
  CHECK(text_only.layers[1].name == "model.layers.0");
}

TEST_CASE("hf Llama 4: layouts not modelled are refused in one line, naming the field") {
  auto document = read_json_file(kScout);
  document["text_config"]["moe_layers"] = {0, 2, 5};
  CHECK_THROWS_WITH_AS(config_model(document), doctest::Contains("field 'text_config.moe_layers'"), InputError);
  document = read_json_file(kScout);
  document["vision_config"]["intermediate_size"] = 4096;
  CHECK_THROWS_WITH_AS(config_model(document), doctest::Contains("field 'vision_config.intermediate_size'"),
                       InputError);
  document = read_json_file(kScout);
  document["text_config"]["no_rope_layers"][0] = 2;
  CHECK_THROWS_WITH_AS(config_model(document), doctest::Contains("field 'text_config.no_rope_layers'"), InputError);
}
