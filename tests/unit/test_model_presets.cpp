// Tests of the model presets: exact parameter counts, layer structure, FLOPs and Korthikanti's activation formula.
#include <doctest/doctest.h>

#include <string>
#include <utility>

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

TEST_CASE("presets: the Llama 3.x, Mistral, Mixtral, Qwen 2.5 / 3 and DeepSeek-V3 presets count their checkpoints") {
  // Each against the checkpoint's stored total (the Hugging Face API's safetensors.total, or a library's preset table
  // that records it): Llama-3.1-8B 8030261248 and -70B 70553706496 (HF API, revisions d04e592b and 349b2ddb);
  // Llama-3.2-3B(-Instruct) 3212749824 (safetensors.parameters.BF16); Llama-3.3-70B-Instruct 70553706496;
  // Mistral-7B-v0.1 7241732096 and v0.3 7248023552 (keras-hub mistral_presets.py "params"); Mixtral-8x7B-v0.1
  // 46702792704 (keras-hub mixtral_presets.py; HF safetensors.total) and 8x22B-v0.1 140620634112; Qwen2.5
  // 0.5B/1.5B/3B/7B/14B/32B/72B 494032768, 1543714304, 3085938688, 7615616512, 14770033664, 32763876352,
  // 72706203648 (keras-hub qwen_presets.py; GGUF general.parameter_count); Qwen3-4B 4022468096, -8B 8190735360,
  // -32B 32762123264, -30B-A3B 30532122624 (the checkpoint's 61064245248 bytes in bf16 / 2); DeepSeek-V3
  // 671026419200 (the HF model, without the multi-token-prediction layer: README_WEIGHTS.md's 685B less its 14B).
  const std::pair<const char*, std::int64_t> expected[] = {
      {"llama3.1-8b", 8'030'261'248},        {"llama3.1-70b", 70'553'706'496},   {"llama3.2-3b", 3'212'749'824},
      {"llama3.3-70b", 70'553'706'496},      {"mistral-7b", 7'241'732'096},      {"mistral-7b-v0.3", 7'248'023'552},
      {"mixtral-8x7b", 46'702'792'704},      {"mixtral-8x22b", 140'620'634'112}, {"qwen2.5-0.5b", 494'032'768},
      {"qwen2.5-1.5b", 1'543'714'304},       {"qwen2.5-3b", 3'085'938'688},      {"qwen2.5-7b", 7'615'616'512},
      {"qwen2.5-14b", 14'770'033'664},       {"qwen2.5-32b", 32'763'876'352},    {"qwen2.5-72b", 72'706'203'648},
      {"qwen3-4b", 4'022'468'096},           {"qwen3-8b", 8'190'735'360},        {"qwen3-32b", 32'762'123'264},
      {"qwen3-30b-a3b", 30'532'122'624},     {"deepseek-v3", 671'026'419'200},
  };
  for (const auto& [name, params] : expected) {
    CAPTURE(name);
    CHECK(preset_model(name).param_count() == params);
  }
  // The presets that have a shipped config.json agree with it tensor for tensor.
  for (const char* name : {"mistral-7b", "mixtral-8x7b", "qwen3-8b", "qwen3-30b-a3b", "deepseek-v3"}) {
    CAPTURE(name);
    const ModelSpec preset = preset_model(name);
    const ModelSpec file = load_model(std::string("examples/hf/") + name + ".json");
    REQUIRE(preset.layers.size() == file.layers.size());
    for (std::size_t i = 0; i < preset.layers.size(); ++i) CHECK(preset.layers[i].param_count() == file.layers[i].param_count());
  }
  // Llama 3.1's rope_scaling and 131072 positions come with the preset: long sequences are allowed.
  CHECK(preset_model("llama3.1-8b").architecture->max_trainable_positions() == 131072);
  CHECK(preset_model("deepseek-v3").architecture->max_trainable_positions() == 163840);
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

TEST_CASE("presets: Qwen2-VL, Qwen2.5-VL and Llama 4 Scout are their checkpoints, as their config.json files import") {
  // Qwen/Qwen2-VL-7B-Instruct 8,291,375,616 (model.safetensors.index.json's total_size 16,582,751,232 bytes in bf16);
  // Qwen/Qwen2.5-VL-7B-Instruct 8,292,166,656 and meta-llama/Llama-4-Scout-17B-16E 108,641,793,536 (the counts
  // examples/hf/SOURCES.md cites for the shipped configs).
  CHECK(preset_model("qwen2-vl-7b").param_count() == 8'291'375'616);
  CHECK(preset_model("qwen2.5-vl-7b").param_count() == 8'292'166'656);
  CHECK(preset_model("llama4-scout-17b-16e").param_count() == 108'641'793'536);
  // The presets with a shipped config.json are that file's model, layer for layer (tensors, work, tokens per sample).
  for (const auto& [name, file] : {std::pair<const char*, const char*>{"qwen2.5-vl-7b", "qwen2.5-vl-7b-instruct"},
                                   {"llama4-scout-17b-16e", "llama4-scout-17b-16e"}}) {
    CAPTURE(name);
    const ModelSpec preset = preset_model(name);
    const ModelSpec loaded = load_model(std::string("examples/hf/") + file + ".json");
    CHECK(preset.layers == loaded.layers);
    CHECK(preset.hidden_size == loaded.hidden_size);
  }
  CHECK(preset_model("llama4-scout-17b-16e").default_seq_len == 8192);
}
