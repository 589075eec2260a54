// Tests of the Hugging Face LLaVA import (costmodel/hf_arch_llava.cpp) and of per-layer token counts (Note [Tokens
// per sample] in model_spec.h): llava-1.5-7b's exact count, module paths as transformers 4.45 names them, vision layers
// on one image's 577 tokens whatever --seq-len, non-causal vision attention, and the model JSON's tokens_per_sample.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cstdint>
#include <string>

#include "hf_example_models.h"
#include "json_input.h"
#include "model_json.h"
#include "model_source.h"
#include "pass_kernels.h"
#include "training.h"
#include "unit_layout.h"

namespace {

using shardplan::ActivationCheckpointing;
using shardplan::ComputePass;
using shardplan::LayerKind;
using shardplan::LayerSpec;
using shardplan::load_model;
using shardplan::ModelSpec;
using shardplan::TrainingConfig;
using shardplan::testing::input_error_message;
using shardplan::testing::params_under;

const char* const kLlava = "examples/hf/llava-1.5-7b.json";

std::size_t index_of(const ModelSpec& model, const std::string& name) {
  for (std::size_t index = 0; index < model.layers.size(); ++index) {
    if (model.layers[index].name == name) return index;
  }
  FAIL("no layer " << name);
  return 0;
}

TrainingConfig training_at(std::int64_t seq_len) {
  TrainingConfig training;
  training.seq_len = seq_len;
  training.micro_batch = 2;
  return training;
}

}  // namespace

TEST_CASE("HF LLaVA: llava-hf/llava-1.5-7b-hf has its published 7,063,427,072 parameters, both towers' in one model") {
  // sum(p.numel()) of LlavaForConditionalGeneration.from_pretrained("llava-hf/llava-1.5-7b-hf") = 7,063,427,072, as
  // two public projects print it (nnethercott's "LLaVA fine-tuning" post: `n = sum(p.numel() ...) # 7063427072`; a
  // test asserting count_parameters(model) == 7063427072 for LlavaConfig.from_pretrained of the same repo).
  const ModelSpec model = load_model(kLlava);
  CHECK(model.param_count() == 7'063'427'072);
  // CLIP ViT-L/14 at 336 px: the 224-px tower's 303,179,776 with (577 - 257) more learned positions of 1024.
  CHECK(params_under(model, "vision_tower.") == 303'179'776 + (577 - 257) * 1024);
  CHECK(params_under(model, "multi_modal_projector") == 1024 * 4096 + 4096 + 4096 * 4096 + 4096);
  // Llama-2-7B's 6,738,415,616 with a vocabulary of 32064 instead of 32000, in the embedding and the head.
  CHECK(params_under(model, "language_model.") == 6'738'415'616 + 2 * 64 * 4096);
  CHECK(model.block_count() == 24 + 1 + 32);
  CHECK(model.layers.front().name == "language_model.model.embed_tokens");  // forward embeds the text first
  CHECK(model.layers[1].name == "vision_tower.vision_model.embeddings");
  const std::size_t last_vision = index_of(model, "vision_tower.vision_model.encoder.layers.23");
  CHECK(model.layers[last_vision + 1].name == "multi_modal_projector");
  CHECK(model.layers[index_of(model, "multi_modal_projector") + 1].name == "language_model.model.layers.0");
  CHECK(model.layers.back().name == "language_model.lm_head");
  CHECK(model.layers[index_of(model, "language_model.model.layers.31") + 1].name == "language_model.model.norm");
  CHECK(model.layers[index_of(model, "multi_modal_projector")].kind == LayerKind::transformer_block);
  CHECK(model.default_seq_len == 4096);  // text_config's max_position_embeddings
}

TEST_CASE("HF LLaVA: the vision tower runs on an image's 577 tokens, the projector on 576, the decoder on --seq-len") {
  const ModelSpec model = load_model(kLlava);
  const LayerSpec& vision = model.layers[index_of(model, "vision_tower.vision_model.encoder.layers.5")];
  const LayerSpec& projector = model.layers[index_of(model, "multi_modal_projector")];
  const LayerSpec& text = model.layers[index_of(model, "language_model.model.layers.5")];
  for (std::int64_t seq_len : {1024, 2048, 4096}) {
    CHECK(vision.tokens_per_sample(seq_len) == 577);   // (336 / 14)² patches + the class token
    CHECK(projector.tokens_per_sample(seq_len) == 576);  // "default": the class token dropped
    CHECK(text.tokens_per_sample(seq_len) == seq_len);
    CHECK(training_at(seq_len).tokens_per_micro_batch(vision) == 2 * 577);
    CHECK(training_at(seq_len).tokens_per_micro_batch(text) == 2 * seq_len);
  }
  // Non-causal attention in the tower (every patch attends to every patch), causal in the decoder.
  CHECK_FALSE(vision.flops.causal_attention);
  CHECK_FALSE(vision.kernels->attention->causal);
  CHECK(text.flops.causal_attention);
  // LLaVA's text_config spells no image token count: the strategy and image_seq_length agree.
  nlohmann::json full = shardplan::read_json_file(kLlava);
  full["vision_feature_select_strategy"] = "full";
  CHECK(input_error_message([&] { load_model(full.dump()); }).find("image_seq_length") != std::string::npos);
  full.erase("image_seq_length");
  const ModelSpec with_class_token = load_model(full.dump());
  CHECK(with_class_token.layers[index_of(with_class_token, "multi_modal_projector")].tokens_per_sample(64) == 577);
}

TEST_CASE("HF LLaVA: a vision layer's FLOPs, kernels and kept bytes are the same at any --seq-len; a decoder's grow") {
  const ModelSpec model = load_model(kLlava);
  const std::size_t vision = index_of(model, "vision_tower.vision_model.encoder.layers.0");
  const std::size_t text = index_of(model, "language_model.model.layers.0");
  const double h = 1024, f = 4096;
  for (std::int64_t seq_len : {600, 2048, 4096}) {
    // Per token: 2·(4h² + 2hf) + Q·Kᵀ and P·V over 577 positions, no causal halving even with flash.
    CHECK(model.layers[vision].forward_flops_per_token(seq_len, true) ==
          doctest::Approx(2.0 * (4 * h * h + 2 * h * f) + 4.0 * h * 577));
  }
  const TrainingConfig short_run = training_at(1024);
  const TrainingConfig long_run = training_at(4096);
  const auto forward = [&](const TrainingConfig& training, std::size_t layer) {
    return shardplan::pass_kernels(model, layer, training, ComputePass::forward, ActivationCheckpointing::none);
  };
  CHECK(forward(short_run, vision) == forward(long_run, vision));
  CHECK(forward(short_run, vision).attention.at(0).seq_len == 577);
  CHECK(forward(short_run, vision).gemms.at(0).m == 2 * 577);  // micro-batch 2 × one image's tokens
  CHECK(forward(long_run, text).flops() > 4.0 * forward(short_run, text).flops() * 0.99);
  for (auto mode : {ActivationCheckpointing::none, ActivationCheckpointing::full}) {
    CHECK(shardplan::kept_activation_bytes(model, short_run, vision, mode) ==
          shardplan::kept_activation_bytes(model, long_run, vision, mode));
    CHECK(shardplan::kept_activation_bytes(model, long_run, text, mode) ==
          4 * shardplan::kept_activation_bytes(model, short_run, text, mode));
  }
  // Full recompute keeps one block input per token: 2 images' 577 tokens × 1024 in bf16.
  CHECK(shardplan::kept_activation_bytes(model, short_run, vision, ActivationCheckpointing::full) ==
        2 * 577 * 1024 * 2);
  // The model's FLOPs per training token count the vision tower per sample: 577/seq of a vision layer's per-token work.
  ModelSpec text_only = model;
  std::erase_if(text_only.layers, [](const LayerSpec& layer) { return layer.fixed_tokens_per_sample.has_value(); });
  const auto vision_flops = [&](std::int64_t seq_len) {
    return model.forward_flops_per_token(seq_len, true) - text_only.forward_flops_per_token(seq_len, true);
  };
  const double vision_share = vision_flops(2048) / vision_flops(4096);
  CHECK(vision_share == doctest::Approx(2.0));  // the same work per sample over half the tokens
}

TEST_CASE("HF LLaVA: text_config takes its class's defaults; unsupported towers and bad fields are one-line errors") {
  nlohmann::json config = shardplan::read_json_file(kLlava);
  config["text_config"] = {{"model_type", "mistral"}, {"vocab_size", 32064}};
  // MistralConfig's defaults: intermediate 14336, 8 kv heads (Mistral-7B's 7,241,732,096 at vocab 32000).
  CHECK(params_under(load_model(config.dump()), "language_model.") == 7'241'732'096 + 2 * 64 * 4096);
  config["text_config"] = {{"model_type", "gemma"}};
  const std::string text_error = input_error_message([&] { load_model(config.dump()); });
  CHECK(text_error.find("text_config.model_type") != std::string::npos);
  CHECK(text_error.find('\n') == std::string::npos);
  config = shardplan::read_json_file(kLlava);
  config["vision_config"]["model_type"] = "vit";
  CHECK(input_error_message([&] { load_model(config.dump()); }).find("vision_config.model_type") != std::string::npos);
  config = shardplan::read_json_file(kLlava);
  config["vision_feature_layer"] = 25;  // hidden_states has 25 entries: -25 .. 24
  CHECK(input_error_message([&] { load_model(config.dump()); }).find("vision_feature_layer") != std::string::npos);
  config["vision_feature_layer"] = {-2, -5};  // two feature layers concatenated: linear_1 reads 2 × 1024
  const ModelSpec two = load_model(config.dump());
  CHECK(params_under(two, "multi_modal_projector") == 2 * 1024 * 4096 + 4096 + 4096 * 4096 + 4096);
  // An unsupported architecture's error names the supported ones, LLaVA and the vision towers among them.
  const std::string unknown = input_error_message([&] {
    load_model(nlohmann::json{{"architectures", {"FuyuForCausalLM"}}, {"model_type", "fuyu"}}.dump());
  });
  for (const char* name : {"LlamaForCausalLM", "CLIPVisionModel", "LlavaForConditionalGeneration"}) {
    CHECK(unknown.find(name) != std::string::npos);
  }
}

TEST_CASE("Model JSON: a layer's tokens_per_sample is read, checked and written back") {
  const nlohmann::json document = {
      {"schema", "shardplan.model/v1"}, {"hidden_size", 64}, {"num_heads", 4},
      {"layers",
       {{{"name", "tower.0"}, {"kind", "transformer_block"}, {"params", 1000}, {"tokens_per_sample", 50},
         {"attention_flops_per_token_per_position", 256.0}, {"causal", false}},
        {{"name", "text.0"}, {"kind", "transformer_block"}, {"params", 1000}}}}};
  const ModelSpec model = shardplan::model_from_json(document, "m.json");
  CHECK(model.layers[0].tokens_per_sample(4096) == 50);
  CHECK(model.layers[1].tokens_per_sample(4096) == 4096);
  CHECK(model.layers[0].forward_flops_per_token(4096, true) ==
        doctest::Approx(model.layers[0].flops.matmul_flops_per_token + 256.0 * 50));
  const nlohmann::json written = shardplan::to_json(model);
  CHECK(written["layers"][0]["tokens_per_sample"] == 50);
  CHECK_FALSE(written["layers"][1].contains("tokens_per_sample"));
  nlohmann::json bad = document;
  bad["layers"][0]["tokens_per_sample"] = 0;
  CHECK(input_error_message([&] { shardplan::model_from_json(bad, "m.json"); }).find("tokens_per_sample") !=
        std::string::npos);
}
