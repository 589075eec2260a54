// Tests of the Hugging Face vision-encoder import (costmodel/hf_arch_vision.cpp): exact parameter counts of published
// models, module paths as transformers names them, non-causal blocks over one image's tokens, bad sizes named.
#include <doctest/doctest.h>

#include "test_support.h"

#include <string>

#include "errors.h"
#include "hf_arch_vision.h"
#include "json_input.h"
#include "model_source.h"

using shardplan::LayerKind;
using shardplan::load_model;
using shardplan::ModelSpec;

TEST_CASE("HF vision: ViT-B/16 (google/vit-base-patch16-224) has torchvision vit_b_16's 86,567,656 parameters") {
  // The same network as torchvision's vit_b_16, whose count the torch-bridge test takes from torch itself
  // (sum(p.numel())), and the Hub's "86.6M params" for google/vit-base-patch16-224.
  const ModelSpec model = load_model("examples/hf/vit-base-patch16-224.json");
  CHECK(model.param_count() == 86567656);
  CHECK(model.default_seq_len == 197);  // (224 / 16)² patches + the class token
  CHECK(model.block_count() == 12);
  CHECK(model.layers.front().name == "vit.embeddings");
  CHECK(model.layers[1].name == "vit.encoder.layer.0");
  CHECK(model.layers.back().name == "classifier");
  for (const auto& layer : model.layers) {
    if (layer.kind == LayerKind::transformer_block) CHECK_FALSE(layer.flops.causal_attention);
  }
  // No causal skipping even with a flash kernel: Q·Kᵀ and P·V over all 197 positions.
  const auto& block = model.layers[1];
  CHECK(block.forward_flops_per_token(197, true) == doctest::Approx(2.0 * (4 * 768 * 768 + 2 * 768 * 3072) +
                                                                    4.0 * 768 * 197));
  CHECK_FALSE(block.kernels->attention->causal);
}

TEST_CASE("HF vision: CLIP ViT-L/14 vision tower (openai/clip-vit-large-patch14) has 303,179,776 parameters") {
  // transformers' CLIPVisionModel of openai/clip-vit-large-patch14 counts 303,179,776 (tanganke/fusion_bench's docs,
  // "Inspection of Model Information": all_params 303179776); the visual projection (1024 × 768) belongs to CLIPModel.
  const ModelSpec model = load_model("examples/hf/clip-vit-large-patch14-vision.json");
  CHECK(model.param_count() == 303179776);
  CHECK(model.default_seq_len == 257);
  CHECK(model.layers[0].name == "vision_model.embeddings");
  CHECK(model.layers[1].name == "vision_model.pre_layrnorm");
  CHECK(model.layers[2].name == "vision_model.encoder.layers.0");
  CHECK(model.layers.back().name == "vision_model.post_layernorm");
}

TEST_CASE("HF vision: SigLIP so400m/14 at 384 px (google/siglip-so400m-patch14-384) has 428,225,600 parameters") {
  // SoViT-400m/14's 428M (Alabdulmohsin et al. 2023, "Getting ViT in Shape", Table 2); 428,225,600 exactly for
  // google/siglip-so400m-patch14-384's vision model as public projects count it (sum of numel), with its
  // attention-pooling head; no class token: (384 / 14)² = 729 tokens.
  const ModelSpec model = load_model("examples/hf/siglip-so400m-patch14-384-vision.json");
  CHECK(model.param_count() == 428225600);
  CHECK(model.default_seq_len == 729);
  CHECK(model.block_count() == 27);
  CHECK(model.layers.back().name == "vision_model.head");
}

TEST_CASE("HF vision: ViTModel has a pooler unless add_pooling_layer is false; qkv_bias counts") {
  nlohmann::json config = shardplan::read_json_file("examples/hf/vit-base-patch16-224.json");
  config["architectures"] = {"ViTModel"};
  const ModelSpec with_pooler = load_model(config.dump());
  CHECK(with_pooler.layers.back().name == "pooler");
  // No classifier (768 × 1000 + 1000), a pooler (768 × 768 + 768), paths without "vit.".
  CHECK(with_pooler.param_count() == 86567656 - 769000 + 590592);
  CHECK(with_pooler.layers[1].name == "encoder.layer.0");
  config["qkv_bias"] = false;
  CHECK(load_model(config.dump()).param_count() == 86567656 - 769000 + 590592 - 12 * 3 * 768);
}

TEST_CASE("HF vision: bad sizes name the field") {
  nlohmann::json config = shardplan::read_json_file("examples/hf/vit-base-patch16-224.json");
  config["num_attention_heads"] = 7;
  CHECK(shardplan::testing::input_error_message([&] { load_model(config.dump()); }).find("num_attention_heads") !=
        std::string::npos);
}
