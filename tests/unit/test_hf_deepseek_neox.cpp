// Tests of the DeepSeek-V2-Lite, DeepSeek-V3 and GPT-NeoX (Pythia) configs: exact published counts, MLA, DeepSeekMoE
// and GPT-NeoX module paths, FLOPs and GEMM shapes that follow the real shapes, and the refusals (TP, bad keys).
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "decoder_builder.h"
#include "errors.h"
#include "hf_config.h"
#include "hf_example_models.h"
#include "json_input.h"
#include "plan.h"

using namespace shardplan;
using shardplan::testing::hf_model;
using shardplan::testing::has_tensor;

namespace {

bool names_tensor(const LayerSpec& layer, const std::string& prefix) {
  for (const auto& tensor : layer.tensors) {
    if (tensor.name.starts_with(prefix)) return true;
  }
  return false;
}

// DeepSeek-V3's FP8 checkpoint stores one fp32 weight_scale_inv per 128 × 128 block of each quantised weight (its
// config's quantization_config.weight_block_size [128, 128]): every linear weight of the blocks but the router.
std::int64_t fp8_scale_count(const LayerSpec& block) {
  std::int64_t scales = 0;
  for (const auto& tensor : block.tensors) {
    if (tensor.shape.size() != 2 || tensor.name == "mlp.gate.weight") continue;
    scales += ((tensor.shape[0] + 127) / 128) * ((tensor.shape[1] + 127) / 128);
  }
  return scales;
}

std::string refusal(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no InputError)";
}

}  // namespace

TEST_CASE("hf deepseek: DeepSeek-V2-Lite imports with its published exact count, MLA without q compression") {
  // deepseek-ai/DeepSeek-V2-Lite: 15.7B total parameters (model card); exactly 15,706,484,224, the HF API's
  // safetensors count (BF16 15706484224), as public weight inventories record it.
  const ModelSpec lite = hf_model("deepseek-v2-lite");
  CHECK(lite.param_count() == 15'706'484'224);
  CHECK(lite.layers.front().name == "model.embed_tokens");
  CHECK(lite.layers.back().name == "lm_head");
  REQUIRE(lite.layers.back().tied_to_layer == std::nullopt);
  // Layer 0 is dense (first_k_dense_replace 1): MLA and a SwiGLU of intermediate_size.
  const LayerSpec& dense = lite.layers[1];
  CHECK(dense.name == "model.layers.0");
  CHECK(has_tensor(dense, "self_attn.q_proj.weight", {16 * 192, 2048}));  // q_lora_rank null: plain q_proj
  CHECK_FALSE(names_tensor(dense, "self_attn.q_a_proj"));
  CHECK(has_tensor(dense, "self_attn.kv_a_proj_with_mqa.weight", {512 + 64, 2048}));
  CHECK(has_tensor(dense, "self_attn.kv_a_layernorm.weight", {512}));
  CHECK(has_tensor(dense, "self_attn.kv_b_proj.weight", {16 * (128 + 128), 512}));
  CHECK(has_tensor(dense, "self_attn.o_proj.weight", {2048, 16 * 128}));
  CHECK_FALSE(names_tensor(dense, "self_attn.k_proj"));
  CHECK(has_tensor(dense, "mlp.gate_proj.weight", {10944, 2048}));
  CHECK_FALSE(dense.moe.has_value());
  // Layer 1 on: 64 routed experts of 1408, two shared ones as one SwiGLU of 2 × 1408, top-6, no correction bias.
  const LayerSpec& sparse = lite.layers[2];
  REQUIRE(sparse.moe.has_value());
  CHECK(sparse.moe->num_experts == 64);
  CHECK(sparse.moe->experts_per_token == 6);
  CHECK(has_tensor(sparse, "mlp.gate.weight", {64, 2048}));
  CHECK(has_tensor(sparse, "mlp.experts.63.down_proj.weight", {2048, 1408}));
  CHECK(has_tensor(sparse, "mlp.shared_experts.gate_proj.weight", {2 * 1408, 2048}));
  CHECK_FALSE(names_tensor(sparse, "mlp.gate.e_score_correction_bias"));
  CHECK_FALSE(names_tensor(sparse, "mlp.shared_expert."));
}

TEST_CASE("hf deepseek: DeepSeek-V3's count is the checkpoint's main model, without the MTP layer") {
  const ModelSpec v3 = hf_model("deepseek-v3");
  // 671B main-model weights (deepseek-ai/DeepSeek-V3 README_WEIGHTS.md: "671B of the Main Model weights and 14B of
  // the Multi-Token Prediction (MTP) Module weights"). The exact figure published is the HF API's safetensors total
  // for the repository, 684,531,386,000 (BF16 3918786560 + F8_E4M3 680571043840 + F32 41555600), which also holds
  // the MTP module (model.layers.61: one more MoE layer; enorm, hnorm, eh_proj 7168 × 14336, shared_head.norm; its
  // own embed_tokens and shared_head.head copies) and the fp32 weight_scale_inv of every 128 × 128 FP8 block. That
  // decomposition reproduces it exactly from this model's tensors, so the main model here is exact.
  const std::int64_t main_model = v3.param_count();
  CHECK(main_model == 671'026'419'200);
  const std::int64_t h = 7168, vocab = 129280;
  const LayerSpec& last_moe = v3.layers[v3.layers.size() - 3];  // model.layers.60
  REQUIRE(last_moe.name == "model.layers.60");
  const std::int64_t mtp = last_moe.param_count() + 2 * h + h * 2 * h + h + 2 * vocab * h;
  std::int64_t scales = fp8_scale_count(last_moe);  // the MTP layer's own
  for (const auto& layer : v3.layers) {
    if (layer.kind == LayerKind::transformer_block) scales += fp8_scale_count(layer);
  }
  CHECK(main_model + mtp + scales == 684'531'386'000);

  // MLA with q compression (q_lora_rank 1536); 3 dense layers, then 256 experts with the correction bias.
  const LayerSpec& dense = v3.layers[3];
  CHECK(dense.name == "model.layers.2");
  CHECK(has_tensor(dense, "self_attn.q_a_proj.weight", {1536, h}));
  CHECK(has_tensor(dense, "self_attn.q_a_layernorm.weight", {1536}));
  CHECK(has_tensor(dense, "self_attn.q_b_proj.weight", {128 * 192, 1536}));
  CHECK_FALSE(names_tensor(dense, "self_attn.q_proj"));
  CHECK_FALSE(dense.moe.has_value());
  const LayerSpec& sparse = v3.layers[4];
  REQUIRE(sparse.moe.has_value());
  CHECK(sparse.moe->num_experts == 256);
  CHECK(sparse.moe->experts_per_token == 8);
  CHECK(has_tensor(sparse, "mlp.gate.e_score_correction_bias", {256}));
  CHECK(has_tensor(sparse, "mlp.shared_experts.down_proj.weight", {h, 2048}));
  CHECK(v3.block_count() == 61);  // no MTP block
}

TEST_CASE("hf deepseek: MLA's FLOPs and GEMM shapes follow its real projections") {
  for (const char* name : {"deepseek-v2-lite", "deepseek-v3"}) {
    CAPTURE(name);
    const ModelSpec model = hf_model(name);
    const MlaArchitecture& mla = *model.architecture->mla;
    const std::int64_t heads = model.num_heads;
    const LayerSpec& dense = model.layers[1];
    // Every weight matrix once, 2 FLOPs per multiply-add: the kernels' GEMMs hold exactly the block's matmul FLOPs.
    REQUIRE(dense.kernels);
    double kernel_flops = 0, weight_flops = 0;
    for (const auto& projection : dense.kernels->projections) {
      kernel_flops += 2.0 * static_cast<double>(projection.in_features * projection.out_features);
    }
    for (const auto& tensor : dense.tensors) {
      if (tensor.shape.size() == 2) weight_flops += 2.0 * static_cast<double>(tensor.element_count());
    }
    CHECK(kernel_flops == doctest::Approx(dense.flops.matmul_flops_per_token));
    CHECK(weight_flops == doctest::Approx(dense.flops.matmul_flops_per_token));
    // QKᵀ over qk_nope + qk_rope per head, P·V over v_head_dim (DeepSeek-V2 §2.1): 2·heads·(192 + 128) per position.
    CHECK(dense.flops.attention_flops_per_token_per_position ==
          doctest::Approx(2.0 * static_cast<double>(heads * (mla.qk_head_dim() + mla.v_head_dim))));
    REQUIRE(dense.kernels->attention);
    CHECK(4 * dense.kernels->attention->heads * dense.kernels->attention->head_dim ==
          2 * heads * (mla.qk_head_dim() + mla.v_head_dim));
    // The kv_b GEMM maps the 512-wide latent to every head's k_nope and v.
    bool has_kv_b = false;
    for (const auto& projection : dense.kernels->projections) {
      if (projection.name == "kv_b_proj") {
        has_kv_b = true;
        CHECK(projection.in_features == mla.kv_lora_rank);
        CHECK(projection.out_features == heads * (mla.qk_nope_head_dim + mla.v_head_dim));
      }
    }
    CHECK(has_kv_b);
  }
}

TEST_CASE("hf deepseek: tensor parallelism is refused by name, and malformed MLA keys are refused") {
  const ModelSpec lite = hf_model("deepseek-v2-lite");
  CHECK(refusal([&] { validate_tensor_parallel_degree(2, lite, 8, 8, "plan: tensor_parallel_degree"); })
            .find("multi-head latent attention") != std::string::npos);
  auto document = read_json_file("examples/hf/deepseek-v2-lite.json");
  document["kv_lora_rank"] = 0;
  CHECK(refusal([&] { architecture_from_hf_config(document, "ds.json"); }).find("ds.json: field 'kv_lora_rank'") !=
        std::string::npos);
  document = read_json_file("examples/hf/deepseek-v2-lite.json");
  document["moe_layer_freq"] = 2;
  CHECK(refusal([&] { architecture_from_hf_config(document, "ds.json"); }).find("field 'moe_layer_freq'") !=
        std::string::npos);
  document = read_json_file("examples/hf/deepseek-v2-lite.json");
  document["attention_bias"] = true;
  CHECK(refusal([&] { architecture_from_hf_config(document, "ds.json"); }).find("field 'attention_bias'") !=
        std::string::npos);
  // n_routed_experts null: every layer dense (DeepseekV2DecoderLayer builds DeepseekV2MLP).
  document = read_json_file("examples/hf/deepseek-v2-lite.json");
  document["n_routed_experts"] = nullptr;
  const DecoderArchitecture dense = architecture_from_hf_config(document, "ds.json");
  CHECK_FALSE(dense.moe.has_value());
  CHECK(dense.mla.has_value());
}

TEST_CASE("hf gpt-neox: Pythia-1B imports with its published exact count and transformers' module paths") {
  // EleutherAI/pythia-1b: 805,736,448 non-embedding parameters (Biderman et al. 2023, "Pythia", Table 1, and the
  // EleutherAI/pythia README's model table), plus the untied 50304 × 2048 embed_in and embed_out: 1,011,781,632, the
  // total the same README table gives.
  const ModelSpec pythia = hf_model("pythia-1b");
  CHECK(pythia.param_count() == 1'011'781'632);
  CHECK(pythia.param_count() - 2 * 50'304 * 2'048 == 805'736'448);
  CHECK(pythia.layers.front().name == "gpt_neox.embed_in");
  CHECK(pythia.layers[pythia.layers.size() - 2].name == "gpt_neox.final_layer_norm");
  CHECK(has_tensor(pythia.layers[pythia.layers.size() - 2], "bias", {2048}));
  const LayerSpec& head = pythia.layers.back();
  CHECK(head.name == "embed_out");
  CHECK(head.tied_to_layer == std::nullopt);
  const LayerSpec& block = pythia.layers[1];
  CHECK(block.name == "gpt_neox.layers.0");
  CHECK(has_tensor(block, "attention.query_key_value.weight", {3 * 2048, 2048}));
  CHECK(has_tensor(block, "attention.query_key_value.bias", {3 * 2048}));
  CHECK(has_tensor(block, "attention.dense.bias", {2048}));
  CHECK(has_tensor(block, "mlp.dense_h_to_4h.weight", {8192, 2048}));
  CHECK(has_tensor(block, "input_layernorm.bias", {2048}));
  CHECK(pythia.architecture->parallel_residual);
  CHECK(pythia.architecture->rotary_fraction == 0.25);
  // The kernels' GEMMs hold exactly the block's matmul FLOPs; RoPE covers a quarter of each head.
  REQUIRE(block.kernels);
  double kernel_flops = 0;
  for (const auto& projection : block.kernels->projections) {
    kernel_flops += 2.0 * static_cast<double>(projection.in_features * projection.out_features);
  }
  CHECK(kernel_flops == doctest::Approx(block.flops.matmul_flops_per_token));
  CHECK(block.kernels->elementwise[1].name == "partial rotary");
  // EleutherAI/gpt-neox-20b: 20,554,567,680 parameters (the model card's "Total params"; Black et al. 2022,
  // "GPT-NeoX-20B", Table 1).
  CHECK(hf_model("gpt-neox-20b").param_count() == 20'554'567'680);
  // Tensor parallelism is refused by name; so is a rotary_pct outside (0, 1].
  CHECK(refusal([&] { validate_tensor_parallel_degree(2, pythia, 8, 8, "plan: tensor_parallel_degree"); })
            .find("GPT-NeoX") != std::string::npos);
  auto document = read_json_file("examples/hf/pythia-1b.json");
  document["rotary_pct"] = 1.5;
  CHECK(refusal([&] { architecture_from_hf_config(document, "p.json"); }).find("p.json: field 'rotary_pct'") !=
        std::string::npos);
}
