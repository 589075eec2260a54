// Tests that each block issue 35 added runs its own kernels in the op-level model (kernel_spec.h): gpt-oss's attention
// sinks and its MXFP4 experts (dequantised once, no per-step kernel), sliding windows, q/k norms (OLMo 2, Qwen3,
// Gemma 3), Llama 4's RoPE-layer L2 norms and NoPE-layer temperature, and the vision towers' non-causal attention.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "hf_example_models.h"
#include "model_presets.h"

using namespace shardplan;

namespace {

ModelSpec example(const std::string& name) {
  return testing::config_model(read_json_file("examples/hf/" + name + ".json"));
}

const LayerSpec& block(const ModelSpec& model, std::size_t index) {
  std::size_t seen = 0;
  for (const LayerSpec& layer : model.layers) {
    if (layer.kind == LayerKind::transformer_block && !layer.fixed_tokens_per_sample && seen++ == index) return layer;
  }
  FAIL("no decoder block " << index);
  throw;
}

const ElementwiseSpec* kernel_named(const LayerSpec& layer, const std::string& name) {
  REQUIRE(layer.kernels);
  const auto& ops = layer.kernels->elementwise;
  const auto found = std::find_if(ops.begin(), ops.end(), [&](const ElementwiseSpec& op) { return op.name == name; });
  return found == ops.end() ? nullptr : &*found;
}

}  // namespace

TEST_CASE("hf block kernels: gpt-oss's sinks, windows and dequantised experts") {
  const ModelSpec model = example("gpt-oss-20b");
  const LayerSpec& sliding = block(model, 0);
  const LayerSpec& full = block(model, 1);
  // GptOssAttention's eager_attention_forward (modeling_gpt_oss.py) concatenates each head's sink logit to its score
  // row before the softmax and drops its column after: one value per head per query read (fp32), one gradient per
  // head summed over the tokens in backward; one exp per row is noise beside the 4·s·q FLOPs, so no attention FLOPs.
  const ElementwiseSpec* sinks = kernel_named(sliding, "attention sinks");
  REQUIRE(sinks);
  CHECK(sinks->forward.fp32_elements == 64.0);  // num_attention_heads
  CHECK(sinks->backward.kernels == 1);
  CHECK(sliding.flops.attention_flops_per_token_per_position == 4.0 * 64 * 64);  // 4 · heads · head_dim, no more
  CHECK(sliding.kernels->attention->window == 128);
  CHECK(full.kernels->attention->window == 0);
  // Note [MXFP4 experts] (hf_arch_gpt_oss.cpp): training holds the experts dequantised to bf16, so no projection is
  // quantised and no dequantisation kernel runs per step (QLoRA's 4-bit weights are the only ones that do).
  for (const ProjectionSpec& projection : sliding.kernels->projections) CHECK_FALSE(projection.quantized);
}

TEST_CASE("hf block kernels: q/k norms are RMSNorm kernels over q and k (OLMo 2, Qwen3, Gemma 3)") {
  // Olmo2Attention: q_norm over heads·head_dim, k_norm over kv_heads·head_dim; Qwen3Attention and Gemma3Attention:
  // RMSNorm(head_dim) on each head. The same elements either way, each norm a LlamaRMSNorm's 8 kernels.
  for (const std::string name : {"olmo2-7b", "qwen3-8b", "gemma3-1b"}) {
    CAPTURE(name);
    const ModelSpec model = example(name);
    const DecoderArchitecture& arch = *model.architecture;
    const ElementwiseSpec* norms = kernel_named(block(model, 0), "q/k norm");
    REQUIRE(norms);
    CHECK(norms->forward.act_elements == 4.0 * static_cast<double>(arch.q_dim() + arch.kv_dim()));
    CHECK(norms->forward.kernels == 16);
  }
  CHECK_FALSE(kernel_named(block(example("llama3-8b"), 0), "q/k norm"));
}

TEST_CASE("hf block kernels: Llama 4's RoPE layers rotate and L2-normalise q and k, its NoPE layers scale q") {
  const ModelSpec model = preset_model("llama4-scout-17b-16e");
  const LayerSpec& rope = block(model, 0);
  const LayerSpec& nope = block(model, 3);  // no_rope_layers: every fourth is 0
  const double q = 40.0 * 128, kv = 8.0 * 128;
  REQUIRE(kernel_named(rope, "rotary"));
  const ElementwiseSpec* l2 = kernel_named(rope, "q/k L2 norm");
  REQUIRE(l2);
  CHECK(l2->forward.act_elements == 2.0 * (q + kv));
  CHECK(l2->forward.fp32_elements == 6.0 * (q + kv));
  CHECK_FALSE(kernel_named(nope, "rotary"));
  CHECK_FALSE(kernel_named(nope, "q/k L2 norm"));
  const ElementwiseSpec* temperature = kernel_named(nope, "attention temperature");
  REQUIRE(temperature);
  CHECK(temperature->forward.act_elements == 2.0 * q);
  CHECK(rope.kernels->attention->chunked);
  CHECK(rope.kernels->attention->window == 8192);
  CHECK(nope.kernels->attention->window == 0);
}

TEST_CASE("hf block kernels: vision towers run non-causal attention and their own GEMMs on their patches") {
  for (const std::string name : {"gemma3-4b-it", "qwen2.5-vl-7b-instruct", "llama4-scout-17b-16e"}) {
    CAPTURE(name);
    const ModelSpec model = example(name);
    std::size_t towers = 0;
    for (const LayerSpec& layer : model.layers) {
      // The tower's encoder blocks (a projector or patch merger runs on the patches too, without attention).
      if (!layer.fixed_tokens_per_sample || layer.flops.attention_flops_per_token_per_position == 0) continue;
      ++towers;
      CAPTURE(layer.name);
      REQUIRE(layer.kernels);
      REQUIRE(layer.kernels->attention);
      CHECK_FALSE(layer.kernels->attention->causal);
      CHECK(layer.kernels->projections.size() >= 4);
      CHECK_FALSE(layer.kernels->elementwise.empty());
    }
    CHECK(towers > 0);
  }
}
