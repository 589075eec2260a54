// Tests of the model presets: exact parameter counts, layer structure, FLOPs and Korthikanti's activation formula.
#include <doctest/doctest.h>

#include "decoder_builder.h"
#include "errors.h"
#include "model_presets.h"
#include "model_source.h"

using namespace shardplan;

TEST_CASE("presets: parameter counts are exact") {
  // Published counts (Hugging Face model cards / safetensors totals).
  const std::pair<const char*, std::int64_t> expected[] = {
      {"llama2-7b", 6'738'415'616},      {"llama2-13b", 13'015'864'320}, {"llama2-70b", 68'976'648'192},
      {"llama3-8b", 8'030'261'248},      {"llama3-70b", 70'553'706'496}, {"llama3.1-405b", 405'853'388'800},
      {"llama3.2-1b", 1'235'814'400},
      {"gpt2", 124'439'808},
  };
  for (const auto& [name, params] : expected) {
    CAPTURE(name);
    CHECK(preset_model(name).param_count() == params);
    // The same model imported from its Hugging Face config.json gives the same count.
    CHECK(load_model(std::string("examples/hf/") + name + ".json").param_count() == params);
  }
}

TEST_CASE("presets: every preset builds, tiny-llama is a few MB, gpt3-175b is ~175B") {
  for (const auto& name : model_preset_names()) {
    CAPTURE(name);
    const ModelSpec model = preset_model(name);
    CHECK(model.param_count() > 0);
    CHECK(model.block_count() >= 1);
  }
  const ModelSpec tiny = preset_model("tiny-llama");
  CHECK(tiny.param_count() * 4 < 8 * 1024 * 1024);  // fp32 bytes: a few MB
  CHECK(tiny.vocab_size == 256);                    // byte-level tokens for the executor
  const double gpt3 = static_cast<double>(preset_model("gpt3-175b").param_count());
  CHECK(gpt3 > 174e9);
  CHECK(gpt3 < 176e9);
}

TEST_CASE("presets: layer structure and tying") {
  const ModelSpec llama = preset_model("llama3-8b");
  REQUIRE(llama.layers.size() == 35);  // embedding, 32 blocks, norm, head
  CHECK(llama.layers.front().kind == LayerKind::embedding);
  CHECK(llama.layers[1].name == "model.layers.0");
  CHECK(llama.layers.back().kind == LayerKind::lm_head);
  CHECK_FALSE(llama.layers.back().tied_to_layer.has_value());
  const ModelSpec gpt2 = preset_model("gpt2");
  REQUIRE(gpt2.layers.back().tied_to_layer.has_value());
  CHECK(*gpt2.layers.back().tied_to_layer == 0);
  CHECK(gpt2.layers.back().param_count() == 0);  // the weight is counted once, in the embedding
}

TEST_CASE("presets: matmul FLOPs are 2 per weight-matrix parameter per token") {
  const ModelSpec model = preset_model("llama2-7b");
  const std::int64_t h = 4096, vocab = 32000, blocks = 32;
  const std::int64_t norms = blocks * 2 * h + h;
  const std::int64_t matmul_params = model.param_count() - vocab * h /* embedding lookup */ - norms;
  double matmul_flops = 0;
  for (const auto& layer : model.layers) matmul_flops += layer.flops.matmul_flops_per_token;
  CHECK(matmul_flops == doctest::Approx(2.0 * static_cast<double>(matmul_params)));
  // Attention: 4·s·h per token per layer without causal skipping, half with it.
  const auto& block = model.layers[1];
  CHECK(block.forward_flops_per_token(4096, false) - block.flops.matmul_flops_per_token ==
        doctest::Approx(4.0 * 4096 * 4096));
  CHECK(block.forward_flops_per_token(4096, true) - block.flops.matmul_flops_per_token ==
        doctest::Approx(2.0 * 4096 * 4096));
}

TEST_CASE("presets: a GPT block keeps exactly sbh(34 + 5as/h) bytes (Korthikanti et al. 2022, eq. 1)") {
  const ModelSpec model = preset_model("gpt3-175b");
  const auto& block = model.layers[2];
  REQUIRE(block.kind == LayerKind::transformer_block);
  const double h = 12288, a = 96;
  for (std::int64_t s : {512, 2048}) {
    const double per_token = block.activation_bytes_per_token(s, 2, false, ActivationCheckpointing::none);
    CHECK(per_token == doctest::Approx(h * (34.0 + 5.0 * a * static_cast<double>(s) / h)));
    // Selective recompute drops the 5as/h term (§5); full recompute keeps 2sbh (§4.1).
    CHECK(block.activation_bytes_per_token(s, 2, false, ActivationCheckpointing::selective) ==
          doctest::Approx(34.0 * h));
    CHECK(block.activation_bytes_per_token(s, 2, false, ActivationCheckpointing::full) == doctest::Approx(2.0 * h));
    // Flash attention never materialises the scores: 34h plus the fp32 log-sum-exp per head.
    CHECK(block.activation_bytes_per_token(s, 2, true, ActivationCheckpointing::none) ==
          doctest::Approx(34.0 * h + 4.0 * a));
  }
}

TEST_CASE("presets: llama block activations follow its shapes (6h + 2kv + 4f elements, GQA)") {
  const ModelSpec model = preset_model("llama3-8b");
  const auto& block = model.layers[1];
  const double h = 4096, kv = 1024, f = 14336, heads = 32;
  CHECK(block.activation_bytes_per_token(8192, 2, true, ActivationCheckpointing::none) ==
        doctest::Approx(2.0 * (6 * h + 2 * kv + 4 * f) + 4.0 * heads));
  CHECK(block.activation_bytes_per_token(1024, 4, false, ActivationCheckpointing::none) ==
        doctest::Approx(4.0 * (6 * h + 2 * kv + 4 * f) + 4.0 * heads * 1024));
}

TEST_CASE("presets: unknown names suggest the closest preset") {
  try {
    preset_model("llama3-8");
    FAIL("expected an InputError");
  } catch (const InputError& error) {
    CHECK(std::string(error.what()).find("'llama3-8b'") != std::string::npos);
  }
  CHECK_THROWS_AS(load_model("no-such-model"), InputError);
  CHECK_THROWS_AS(load_model("examples/hf/does-not-exist.json"), InputError);
}

TEST_CASE("presets: invalid architectures are rejected with the field named") {
  DecoderArchitecture arch = preset_model("tiny-llama").architecture.value();
  arch.num_kv_heads = 3;  // does not divide 4 heads
  CHECK_THROWS_WITH_AS(build_decoder("bad", arch, "test"), doctest::Contains("num_kv_heads"), InputError);
  arch = preset_model("tiny-llama").architecture.value();
  arch.num_heads = 5;  // does not divide hidden 128
  CHECK_THROWS_WITH_AS(build_decoder("bad", arch, "test"), doctest::Contains("num_heads"), InputError);
  arch.num_heads = 0;
  CHECK_THROWS_AS(build_decoder("bad", arch, "test"), InputError);
}
