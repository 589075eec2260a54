// Tests of the Hugging Face families beyond Llama/Mistral/Qwen2/GPT-2 without experts: Phi-3's fused projections,
// Gemma 2/3's sandwich norms, soft-capping and tied embeddings, Llama 3.x's rope_scaling; exact counts, module paths.
#include <doctest/doctest.h>

#include <string>

#include "decoder_builder.h"
#include "finetune_apply.h"
#include "hf_config.h"
#include "hf_example_models.h"
#include "json_input.h"

using namespace shardplan;
using shardplan::testing::hf_model;
using shardplan::testing::has_tensor;

TEST_CASE("hf families: Phi-3's fused qkv_proj and gate_up_proj, with the published parameter count") {
  // microsoft/Phi-3-mini-4k-instruct model card: "3.8B parameters"; exactly 3,821,079,552 in keras-team/keras-hub
  // keras_hub/src/models/phi3/phi3_presets.py (phi3_mini_4k_instruct_en "params") and the HF API's NumWeights
  // (32 blocks of 113,252,352, untied 32064 × 3072 embedding and head, the final norm).
  const ModelSpec phi3 = hf_model("phi3-mini-4k");
  CHECK(phi3.param_count() == 3'821'079'552);
  const LayerSpec& block = phi3.layers[1];
  CHECK(block.name == "model.layers.0");
  CHECK(has_tensor(block, "self_attn.qkv_proj.weight", {3 * 3072, 3072}));
  CHECK(has_tensor(block, "mlp.gate_up_proj.weight", {2 * 8192, 3072}));
  CHECK_FALSE(has_tensor(block, "self_attn.q_proj.weight", {3072, 3072}));
  // The same work as separate projections, in four GEMMs.
  REQUIRE(block.kernels);
  CHECK(block.kernels->projections.size() == 4);
  double kernel_flops = 0;
  for (const auto& projection : block.kernels->projections) {
    kernel_flops += 2.0 * static_cast<double>(projection.in_features * projection.out_features);
  }
  CHECK(kernel_flops == doctest::Approx(block.flops.matmul_flops_per_token));
  // PEFT's default LoRA targets for "phi3" (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
  CHECK(lora_target_modules(phi3, FinetuneConfig{}) == std::vector<std::string>{"qkv_proj"});
}

TEST_CASE("hf families: Llama 3.x configs with rope_scaling import with their published counts") {
  // meta-llama/Llama-3.2-1B (tied embeddings, rope_type llama3): 1,235,814,400 parameters, as the preset.
  CHECK(hf_model("llama3.2-1b").param_count() == 1'235'814'400);
  CHECK(hf_model("llama3.1-405b").param_count() == 405'853'388'800);
}

TEST_CASE("hf families: Gemma 2 and Gemma 3 (text): head_dim, sandwich norms, tied embeddings, logit soft-capping") {
  // google/gemma-2-2b: 2,614,341,888 parameters (the model card's 2.6B; the HF API's safetensors parameter count
  // "BF16": 2614341888, as public weight inventories record it; 26 blocks of 77,865,984, the tied
  // 256000 x 2304 embedding, the final norm).
  const ModelSpec gemma2 = hf_model("gemma2-2b");
  CHECK(gemma2.param_count() == 2'614'341'888);
  const LayerSpec& block = gemma2.layers[1];
  CHECK(has_tensor(block, "self_attn.q_proj.weight", {8 * 256, 2304}));
  CHECK(has_tensor(block, "pre_feedforward_layernorm.weight", {2304}));
  CHECK(has_tensor(block, "post_feedforward_layernorm.weight", {2304}));
  CHECK(gemma2.architecture->tie_word_embeddings);  // Gemma2Config's default; the config omits the key
  CHECK(gemma2.architecture->final_logit_softcap == 30.0);
  const LayerSpec& head = gemma2.layers.back();
  CHECK(head.tied_to_layer == std::optional<std::size_t>(0));
  CHECK(head.kernels->elementwise.front().name == "final logit soft-capping");

  // google/gemma-3-1b-it: 999,885,952 parameters (the card's 1B; exactly so in keras-team/keras-hub
  // keras_hub/src/models/gemma3/gemma3_presets.py, gemma3_1b "params"); q/k norms, no soft-capping, one kv head.
  const ModelSpec gemma3 = hf_model("gemma3-1b");
  CHECK(gemma3.param_count() == 999'885'952);
  CHECK(has_tensor(gemma3.layers[1], "self_attn.q_norm.weight", {256}));
  CHECK(has_tensor(gemma3.layers[1], "self_attn.k_proj.weight", {256, 1152}));
  CHECK(gemma3.architecture->final_logit_softcap == 0.0);
}
