// Tests of the model reader on files the torch bridge writes (Note [Measured layers] in model_json.cpp): measured
// masks, s² terms, the checkpointed input, per-layer causality, the root module's own parameters, and the total.
#include <doctest/doctest.h>

#include "test_support.h"

#include <string>

#include "errors.h"
#include "model_json.h"

namespace {

using nlohmann::json;
using shardplan::ActivationCheckpointing;
using shardplan::LayerKind;
using shardplan::ModelSpec;
using shardplan::testing::input_error_message;

// A two-block encoder as scripts/import-torch writes it (values of torchvision's vit_b_16, measured in fp32).
json bridge_document() {
  const json block = {
      {"name", "encoder.layers.encoder_layer_0"},
      {"class", "torchvision.models.vision_transformer.EncoderBlock"},
      {"kind", "transformer_block"},
      {"tensors", {{{"name", "ln_1.weight"}, {"shape", {768}}, {"dtype", "float32"}},
                   {{"name", "mlp.0.weight"}, {"shape", {3072, 768}}, {"dtype", "float32"}}}},
      {"matmul_flops_per_token", 14155776.0},
      {"attention_flops_per_token_per_position", 3072.0},
      {"activation_elements_per_token", 12292.0},
      {"activation_score_elements_per_token_per_position", 12.0},
      {"activation_mask_bytes_per_token", 768.0},
      {"activation_score_mask_bytes_per_token_per_position", 12.0},
      {"checkpoint_elements_per_token", 768.0},
      {"causal", false},
      {"attention_heads", 12},
      {"measured", {{"activation_dtype", "float32"}, {"samples", json::array()}}}};
  json second = block;
  second["name"] = "encoder.layers.encoder_layer_1";
  return {{"schema", "shardplan.model/v1"},
          {"name", "vit_b_16"},
          {"hidden_size", 768},
          {"num_heads", 12},
          {"default_seq_len", 197},
          {"params", 768 + 2 * (768 + 3072 * 768)},
          {"source", {{"callable", "torchvision.models.vit_b_16"}, {"torch", "1.13.0a0"}}},
          {"wrap_candidates", {"torchvision.models.vision_transformer.EncoderBlock"}},
          {"module_tree", json::array()},
          {"layers",
           {{{"name", ""}, {"class", "VisionTransformer"}, {"kind", "other"},
             {"tensors", {{{"name", "class_token"}, {"shape", {1, 1, 768}}, {"dtype", "float32"}}}},
             {"matmul_flops_per_token", 0.0}, {"activation_elements_per_token", 0.0}},
            block, second}}};
}

}  // namespace

TEST_CASE("measured layers: masks, s² terms, the checkpointed input and non-causal attention are read") {
  const ModelSpec model = shardplan::model_from_json(bridge_document(), "vit.json");
  REQUIRE(model.layers.size() == 3);
  CHECK(model.layers[0].name.empty());  // the root module's own parameter
  CHECK(model.param_count() == 768 + 2 * (768 + 3072 * 768));
  const auto& block = model.layers[1];
  CHECK(block.kind == LayerKind::transformer_block);
  CHECK_FALSE(block.flops.causal_attention);
  CHECK(block.activations.mask_bytes_per_token == 768.0);
  CHECK(block.activations.score_mask_bytes_per_token_per_position == 12.0);
  CHECK(block.activations.checkpoint_elements_per_token == 768.0);
  CHECK(block.activations.flash_stat_bytes_per_token == 4.0 * 12);  // fp32 log-sum-exp per head
  // Eager fp32 at 197 tokens: 4 bytes per element, per score, plus the masks.
  CHECK(block.activation_bytes_per_token(197, 4, false, ActivationCheckpointing::none) ==
        doctest::Approx(12292.0 * 4 + 768 + 197 * (12.0 * 4 + 12)));
  CHECK(block.activation_bytes_per_token(197, 4, false, ActivationCheckpointing::full) == 768.0 * 4);
  // No causal skipping for an encoder, even with a flash kernel.
  CHECK(block.forward_flops_per_token(197, true) == doctest::Approx(14155776.0 + 3072.0 * 197));
}

TEST_CASE("measured layers: a layer without attention keeps no flash statistics; hand-written files stay causal") {
  json document = bridge_document();
  document["layers"][2]["attention_flops_per_token_per_position"] = 0.0;
  document["layers"][2].erase("causal");
  const ModelSpec model = shardplan::model_from_json(document, "vit.json");
  CHECK(model.layers[2].activations.flash_stat_bytes_per_token == 0.0);
  CHECK(model.layers[2].flops.causal_attention);
}

TEST_CASE("measured layers: the recorded total must be the layers' sum; 'measured' must be an object") {
  json document = bridge_document();
  document["params"] = 12345;
  const std::string message = input_error_message([&] { shardplan::model_from_json(document, "vit.json"); });
  CHECK(message.find("vit.json") != std::string::npos);
  CHECK(message.find("params") != std::string::npos);
  CHECK(message.find(std::to_string(768 + 2 * (768 + 3072 * 768))) != std::string::npos);

  document = bridge_document();
  document["layers"][1]["measured"] = 3;
  const std::string measured = input_error_message([&] { shardplan::model_from_json(document, "vit.json"); });
  CHECK(measured.find("measured") != std::string::npos);
  document = bridge_document();
  document["layers"][1]["causal"] = "no";
  CHECK(input_error_message([&] { shardplan::model_from_json(document, "vit.json"); }).find("causal") !=
        std::string::npos);
}
