// Tests of the StarCoder2, Falcon, Cohere, InternLM2, gpt-oss and Gemma 3 multimodal imports (issue 35): exact counts
// against the released checkpoints' stored totals, the module paths and shapes that differ from llama's, Note [Sliding-window attention]'s
// compute, and the one-line refusals (ALiBi, gpt-oss layer kinds, mismatched StarCoder2 dropouts).
#include <doctest/doctest.h>

#include <string>

#include "decoder_builder.h"
#include "errors.h"
#include "hf_arch_gemma3_vlm.h"
#include "hf_config.h"
#include "hf_example_models.h"
#include "json_input.h"

using namespace shardplan;
using shardplan::testing::has_tensor;
using shardplan::testing::hf_model;

namespace {

ModelSpec from_document(const nlohmann::json& document) {
  return build_decoder("m", architecture_from_hf_config(document, "config.json"), "config.json");
}

std::string error_of(const nlohmann::json& document) {
  try {
    (void)from_document(document);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("hf StarCoder2: LayerNorms and biases everywhere, a GELU MLP, the released 3B's, 7B's and 15B's counts") {
  // bigcode/starcoder2-3b: 3,030,371,328 parameters (HF safetensors metadata); tied head. 30 blocks of q and o
  // 3072² + 3072, k and v 256 · 3072 + 256, c_fc 12288 · 3072 + 12288, c_proj 3072 · 12288 + 3072, two LayerNorms
  // of weight and bias; the 49152 × 3072 embedding; the final LayerNorm.
  const ModelSpec sc3 = hf_model("starcoder2-3b");
  CHECK(sc3.param_count() == 3'030'371'328);
  const LayerSpec& block = sc3.layers[1];
  CHECK(block.name == "model.layers.0");
  CHECK(has_tensor(block, "input_layernorm.bias", {3072}));
  CHECK(has_tensor(block, "self_attn.k_proj.bias", {256}));
  CHECK(has_tensor(block, "self_attn.o_proj.bias", {3072}));
  CHECK(has_tensor(block, "mlp.c_fc.weight", {12288, 3072}));
  CHECK(has_tensor(block, "mlp.c_fc.bias", {12288}));
  CHECK(has_tensor(block, "mlp.c_proj.weight", {3072, 12288}));
  CHECK(has_tensor(block, "mlp.c_proj.bias", {3072}));
  CHECK_FALSE(has_tensor(block, "mlp.gate_proj.weight", {12288, 3072}));
  CHECK(block.tensors.size() == 16);
  CHECK(sc3.layers.back().tied_to_layer == std::optional<std::size_t>(0));
  CHECK(has_tensor(sc3.layers[sc3.layers.size() - 2], "bias", {3072}));  // model.norm is a LayerNorm
  // The released 3B trains with dropout 0.1 on the residual branches, the scores and the embedding: its masks.
  CHECK(block.activations.mask_bytes_per_token == 2.0 * 3072);
  CHECK(sc3.layers[0].activations.mask_bytes_per_token == 3072.0);
  REQUIRE(block.kernels);
  CHECK(block.kernels->projections.size() == 6);
  CHECK(block.kernels->projections[4].name == "c_fc");
  CHECK(block.kernels->attention->window == 4096);

  // bigcode/starcoder2-7b (4608 wide, 32 blocks, 36 heads over 4 kv heads, 18432-wide MLP, tied): 7,173,923,840.
  auto document = read_json_file("examples/hf/starcoder2-3b.json");
  document["hidden_size"] = 4608;
  document["intermediate_size"] = 18432;
  document["num_hidden_layers"] = 32;
  document["num_attention_heads"] = 36;
  document["num_key_value_heads"] = 4;
  CHECK(from_document(document).param_count() == 7'173'923'840);
  // bigcode/starcoder2-15b, its config as released (untied): 15,957,889,024.
  CHECK(hf_model("starcoder2-15b").param_count() == 15'957'889'024);

  // One dropout rate is modelled: the three must agree. use_bias false drops every linear bias, not the norms'.
  document = read_json_file("examples/hf/starcoder2-3b.json");
  document["attention_dropout"] = 0.0;
  CHECK(error_of(document).find("field 'attention_dropout'") != std::string::npos);
  document = read_json_file("examples/hf/starcoder2-3b.json");
  document["use_bias"] = false;
  const ModelSpec unbiased = from_document(document);
  CHECK(has_tensor(unbiased.layers[1], "input_layernorm.bias", {3072}));
  CHECK_FALSE(has_tensor(unbiased.layers[1], "mlp.c_fc.bias", {12288}));
  CHECK(unbiased.param_count() == 3'030'371'328 - 30 * (3072 + 256 + 256 + 3072 + 12288 + 3072));
}

TEST_CASE("hf sliding windows: attention FLOPs of a windowed layer, full ones unchanged (Note [Sliding-window attention])") {
  const ModelSpec sc3 = hf_model("starcoder2-3b");
  const LayerSpec& block = sc3.layers[1];
  CHECK(block.flops.attention_window == 4096);
  // Within the window, plain causal attention: half the s² scores.
  const double per_position = block.flops.attention_flops_per_token_per_position;
  CHECK(block.forward_flops_per_token(4096, true) ==
        doctest::Approx(block.flops.matmul_flops_per_token + 0.5 * per_position * 4096));
  // Beyond it, each query attends to the last 4096 keys: w·s − w²/2 of s² (FlashAttention's window_size).
  const double s = 16384, w = 4096;
  CHECK(block.forward_flops_per_token(16384, true) ==
        doctest::Approx(block.flops.matmul_flops_per_token + per_position * (w - w * w / (2 * s))));
  // A kernel that materialises the scores computes them all, window or not.
  CHECK(block.forward_flops_per_token(16384, false) ==
        doctest::Approx(block.flops.matmul_flops_per_token + per_position * s));
  CHECK(masked_attention_share(16384, 4096, true) == doctest::Approx(0.25 - 1.0 / 32));
  CHECK(masked_attention_share(16384, 0, true) == 0.5);
  CHECK(masked_attention_share(16384, 0, false) == 1.0);
  // Not causal, a window is a block of 4096 tokens among themselves (Qwen2.5-VL's vision windows): 4096/16384 of s².
  CHECK(masked_attention_share(16384, 4096, false) == 0.25);
}

TEST_CASE("hf Falcon: fused query_key_value, multi-query and grouped heads, parallel blocks, the released counts") {
  // tiiuae/falcon-7b: 6,921,720,704 parameters (FalconForCausalLM.num_parameters(): the head is word_embeddings').
  // The checkpoint stores lm_head.weight beside it, 7,217,189,760 elements in all (the size public model-size tables
  // give tiiuae/falcon-7b): that copy counted once more, 65024 × 4544.
  const ModelSpec f7 = hf_model("falcon-7b");
  CHECK(f7.param_count() == 6'921'720'704);
  CHECK(f7.param_count() + 65024 * 4544 == 7'217'189'760);
  const LayerSpec& block = f7.layers[1];
  CHECK(block.name == "transformer.h.0");
  CHECK(f7.layers[0].name == "transformer.word_embeddings");
  CHECK(has_tensor(block, "self_attention.query_key_value.weight", {4544 + 2 * 64, 4544}));  // multi-query
  CHECK(has_tensor(block, "self_attention.dense.weight", {4544, 4544}));
  CHECK(has_tensor(block, "mlp.dense_h_to_4h.weight", {18176, 4544}));
  CHECK(has_tensor(block, "mlp.dense_4h_to_h.weight", {4544, 18176}));
  CHECK(has_tensor(block, "input_layernorm.bias", {4544}));
  CHECK_FALSE(has_tensor(block, "post_attention_layernorm.weight", {4544}));  // parallel_attn: one norm
  CHECK(block.tensors.size() == 6);
  CHECK(f7.layers.back().tied_to_layer == std::optional<std::size_t>(0));

  // tiiuae/falcon-40b: new_decoder_architecture, 128 heads over 8 kv heads, ln_attn and ln_mlp: 41,303,293,952
  // (the same arithmetic: 60 × 679,510,016 + 532,676,608 + 16,384, tied head).
  const ModelSpec f40 = hf_model("falcon-40b");
  CHECK(f40.param_count() == 41'303'293'952);
  CHECK(has_tensor(f40.layers[1], "self_attention.query_key_value.weight", {(128 + 2 * 8) * 64, 8192}));
  CHECK(has_tensor(f40.layers[1], "ln_attn.weight", {8192}));
  CHECK(has_tensor(f40.layers[1], "ln_mlp.bias", {8192}));

  // ALiBi is refused with the field named, in one line; bias and the sequential block are modelled.
  auto document = read_json_file("examples/hf/falcon-7b.json");
  document["alibi"] = true;
  const std::string message = error_of(document);
  CHECK(message.find("field 'alibi'") != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
  document["alibi"] = false;
  document["parallel_attn"] = false;
  CHECK(has_tensor(from_document(document).layers[1], "post_attention_layernorm.weight", {4544}));
}

TEST_CASE("hf Cohere: bias-free LayerNorms, a parallel block, per-head q/k norms, the released Aya Expanse 8B count") {
  // CohereForAI/aya-expanse-8b (CohereForCausalLM): 8,028,033,024 parameters, its safetensors metadata's
  // parameter_count. 32 blocks of q and o 4096², k and v 1024 · 4096, 3 · 4096 · 14336 MLP and one bias-free
  // LayerNorm; the tied 256000 × 4096 embedding; the final norm.
  const ModelSpec aya = hf_model("aya-expanse-8b");
  CHECK(aya.param_count() == 8'028'033'024);
  const LayerSpec& block = aya.layers[1];
  CHECK(has_tensor(block, "input_layernorm.weight", {4096}));
  CHECK_FALSE(has_tensor(block, "input_layernorm.bias", {4096}));
  CHECK_FALSE(has_tensor(block, "post_attention_layernorm.weight", {4096}));
  CHECK(block.tensors.size() == 8);
  CHECK(aya.layers.back().tied_to_layer == std::optional<std::size_t>(0));
  REQUIRE(block.kernels);
  CHECK(block.kernels->elementwise.front().name == "layernorm");

  // Command R+ (use_qk_norm): q_norm and k_norm weigh each head apart, CohereLayerNorm((heads, head_dim)).
  auto document = read_json_file("examples/hf/aya-expanse-8b.json");
  document["use_qk_norm"] = true;
  const ModelSpec normed = from_document(document);
  CHECK(has_tensor(normed.layers[1], "self_attn.q_norm.weight", {32, 128}));
  CHECK(has_tensor(normed.layers[1], "self_attn.k_norm.weight", {8, 128}));
  CHECK(normed.param_count() == 8'028'033'024 + 32 * (32 + 8) * 128);
}

TEST_CASE("hf InternLM2: fused wqkv, its module names, the released 7B's count") {
  // internlm/internlm2_5-7b-chat: 7,737,708,544 parameters (its safetensors metadata's BF16 parameter_count; the
  // checkpoint's 227 tensors). 32 blocks of wqkv (4096 + 2 · 1024) × 4096, wo 4096², w1/w3/w2 3 · 4096 · 14336, two
  // RMSNorms; the untied 92544 × 4096 tok_embeddings and output; the final norm.
  const ModelSpec internlm = hf_model("internlm2.5-7b");
  CHECK(internlm.param_count() == 7'737'708'544);
  CHECK(internlm.layers[0].name == "model.tok_embeddings");
  CHECK(internlm.layers.back().name == "output");
  const LayerSpec& block = internlm.layers[1];
  CHECK(has_tensor(block, "attention_norm.weight", {4096}));
  CHECK(has_tensor(block, "attention.wqkv.weight", {6144, 4096}));
  CHECK(has_tensor(block, "attention.wo.weight", {4096, 4096}));
  CHECK(has_tensor(block, "feed_forward.w1.weight", {14336, 4096}));
  CHECK(has_tensor(block, "feed_forward.w2.weight", {4096, 14336}));
  CHECK(has_tensor(block, "ffn_norm.weight", {4096}));
  CHECK(block.tensors.size() == 7);
  // internlm2_5-1_8b-chat (2048 wide, 24 blocks, 16 heads over 8, 8192-wide MLP): 1,889,110,016.
  auto document = read_json_file("examples/hf/internlm2.5-7b.json");
  document["hidden_size"] = 2048;
  document["intermediate_size"] = 8192;
  document["num_hidden_layers"] = 24;
  document["num_attention_heads"] = 16;
  CHECK(from_document(document).param_count() == 1'889'110'016);
  // The config class defaults bias to true: wqkv and wo then carry biases.
  document.erase("bias");
  const ModelSpec biased = from_document(document);
  CHECK(has_tensor(biased.layers[1], "attention.wqkv.bias", {4096}));
  CHECK(has_tensor(biased.layers[1], "attention.wo.bias", {2048}));
}

TEST_CASE("hf gpt-oss: biased router and experts, attention sinks, alternating windows, logical parameters") {
  // openai/gpt-oss-20b: 20,914,757,184 parameters, the Hub's safetensors.total and the GGUF's
  // general.parameter_count (the model card's 20.91B). Note [MXFP4 experts] in hf_arch_gpt_oss.cpp: logical
  // parameters, each MXFP4-stored expert weight counted once.
  const ModelSpec oss = hf_model("gpt-oss-20b");
  CHECK(oss.param_count() == 20'914'757'184);
  const LayerSpec& sliding = oss.layers[1];
  const LayerSpec& full = oss.layers[2];
  CHECK(has_tensor(sliding, "self_attn.sinks", {64}));
  CHECK(has_tensor(sliding, "self_attn.q_proj.weight", {4096, 2880}));
  CHECK(has_tensor(sliding, "self_attn.o_proj.bias", {2880}));
  CHECK(has_tensor(sliding, "mlp.router.weight", {32, 2880}));
  CHECK(has_tensor(sliding, "mlp.router.bias", {32}));
  CHECK(has_tensor(sliding, "mlp.experts.gate_up_proj", {32, 2880, 5760}));
  CHECK(has_tensor(sliding, "mlp.experts.gate_up_proj_bias", {32, 5760}));
  CHECK(has_tensor(sliding, "mlp.experts.down_proj", {32, 2880, 2880}));
  CHECK(has_tensor(sliding, "mlp.experts.down_proj_bias", {32, 2880}));
  CHECK(sliding.flops.attention_window == 128);
  CHECK(full.flops.attention_window == 0);
  REQUIRE(sliding.moe);
  CHECK(sliding.moe->routed_expert_elements == 32 * (3 * 2880 * 2880 + 2 * 2880 + 2880));
  // openai/gpt-oss-120b (36 blocks, 128 experts): 116,829,156,672, the Hub's safetensors.total (116.83B).
  auto document = read_json_file("examples/hf/gpt-oss-20b.json");
  document["num_hidden_layers"] = 36;
  document["num_local_experts"] = 128;
  document.erase("layer_types");  // GptOssConfig's default: alternating, sliding first
  CHECK(from_document(document).param_count() == 116'829'156'672);
  // An unknown layer kind is refused in one line (any list of the two kinds is read: test_hf_sliding_window.cpp).
  document = read_json_file("examples/hf/gpt-oss-20b.json");
  document["layer_types"][1] = "chunked_attention";
  const std::string message = error_of(document);
  CHECK(message.find("field 'layer_types'") != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
}

TEST_CASE("hf Falcon 3 is a LlamaForCausalLM: its head_dim of 256 apart from hidden / heads is read") {
  // tiiuae/Falcon3-7B-Base's shape keys (LlamaForCausalLM, 3072 wide, 12 heads of 256 over 4 kv heads, 23040-wide
  // MLP, 28 layers, untied, vocab 131080): no Falcon code path, the llama import's head_dim. The count is the
  // arithmetic of those shapes (not checked against a stored total here).
  const nlohmann::json falcon3 = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                                  {"hidden_size", 3072},                   {"intermediate_size", 23040},
                                  {"num_hidden_layers", 28},               {"num_attention_heads", 12},
                                  {"num_key_value_heads", 4},              {"head_dim", 256},
                                  {"vocab_size", 131080},                  {"max_position_embeddings", 32768},
                                  {"tie_word_embeddings", false},          {"attention_bias", false},
                                  {"mlp_bias", false},                     {"rope_theta", 1000042}};
  const ModelSpec model = from_document(falcon3);
  CHECK(has_tensor(model.layers[1], "self_attn.q_proj.weight", {3072, 3072}));
  CHECK(has_tensor(model.layers[1], "self_attn.k_proj.weight", {1024, 3072}));
  const std::int64_t block = 2 * 3072 * 3072 + 2 * 1024 * 3072 + 3 * 3072 * 23040 + 2 * 3072;
  CHECK(model.param_count() == 28 * block + 2 * 131080 * 3072 + 3072);
}

TEST_CASE("hf Gemma 3 multimodal: SigLIP tower, pooling projector, Gemma 3 text, the released 4B's exact count") {
  // google/gemma-3-4b-it: 4,300,079,472 parameters, the Hub's safetensors.total. The text model 3,880,263,168 (34
  // blocks of 8 heads of 256 over 4, 10240-wide GeGLU, four norms and the q/k norms; the tied 262208 × 2560
  // embedding, Gemma3TextConfig's defaults filling what text_config omits), the SigLIP so400m tower at 896 px
  // 416,866,032 (4096 patches of 14², 27 blocks of 1152, post_layernorm, no head), the projector 2,950,272
  // (mm_input_projection_weight 1152 × 2560 and mm_soft_emb_norm).
  const std::string path = "examples/hf/gemma3-4b-it.json";
  const nlohmann::json document = read_json_file(path);
  REQUIRE(is_hf_gemma3_vlm_config(document));
  const ModelSpec gemma = gemma3_vlm_model_from_hf_config(document, "gemma3-4b-it", path);
  CHECK(gemma.param_count() == 4'300'079'472);
  std::int64_t vision = 0, projector = 0;
  const LayerSpec* projector_layer = nullptr;
  for (const LayerSpec& layer : gemma.layers) {
    if (layer.name.starts_with("vision_tower.")) vision += layer.param_count();
    if (layer.name == "multi_modal_projector") {
      projector += layer.param_count();
      projector_layer = &layer;
    }
  }
  CHECK(vision == 416'866'032);
  CHECK(projector == 2'950'272);
  REQUIRE(projector_layer != nullptr);
  CHECK(has_tensor(*projector_layer, "mm_input_projection_weight", {1152, 2560}));
  CHECK(projector_layer->tokens_per_sample(4096) == 256);  // mm_tokens_per_image, pooled 4 × 4 from 64 × 64 patches
  CHECK(gemma.layers[0].name == "language_model.model.embed_tokens");
  CHECK(gemma.layers.back().name == "language_model.lm_head");
  CHECK(gemma.layers.back().tied_to_layer == std::optional<std::size_t>(0));
  CHECK(gemma.layers[1].tokens_per_sample(4096) == 4096);  // the tower runs on the image's 64 × 64 patches

  // A head on the tower is not what Gemma 3 reads: refused in one line, the field named.
  nlohmann::json headed = document;
  headed["vision_config"]["vision_use_head"] = true;
  try {
    (void)gemma3_vlm_model_from_hf_config(headed, "g", path);
    FAIL("accepted");
  } catch (const InputError& error) {
    CHECK(std::string(error.what()).find("'vision_config.vision_use_head'") != std::string::npos);
  }
}
