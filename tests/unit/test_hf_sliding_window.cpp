// Tests of sliding-window and chunked layers read from Hugging Face configs (Notes [Sliding-window attention] and
// [Chunked attention] in kernel_spec.h): Gemma 2's alternation, Gemma 3's five local to one global, Mistral's and
// Phi-3's every-layer window, Qwen2's and Qwen3's use_sliding_window from max_window_layers on, Qwen3-MoE's on every
// layer, gpt-oss's layer_types, Llama 4's chunks; only windowed layers change, and only past the window.
#include <doctest/doctest.h>

#include <string>

#include "decoder_builder.h"
#include "errors.h"
#include "hf_config.h"
#include "hf_example_models.h"
#include "json_input.h"
#include "model_source.h"
#include "pass_kernels.h"
#include "training.h"

using namespace shardplan;
using shardplan::testing::config_model;
using shardplan::testing::hf_model;

namespace {

ModelSpec from_document(const nlohmann::json& document) {
  return build_decoder("m", architecture_from_hf_config(document, "config.json"), "config.json");
}

// The windows of the transformer blocks, in order (0: full attention).
std::vector<std::int64_t> block_windows(const ModelSpec& model) {
  std::vector<std::int64_t> windows;
  for (const LayerSpec& layer : model.layers) {
    if (layer.kind != LayerKind::transformer_block) continue;
    windows.push_back(layer.flops.attention_window);
    REQUIRE(layer.kernels);
    REQUIRE(layer.kernels->attention);
    CHECK(layer.kernels->attention->window == layer.flops.attention_window);
  }
  return windows;
}

// The flash attention kernel's forward FLOPs of model.layers[index] for one sequence of seq_len.
double flash_attention_flops(const ModelSpec& model, std::size_t index, std::int64_t seq_len) {
  TrainingConfig training;
  training.seq_len = seq_len;
  training.micro_batch = 1;
  return pass_kernels(model, index, training, ComputePass::forward, ActivationCheckpointing::none).attention_flops();
}

}  // namespace

TEST_CASE("sliding windows: Gemma 2's local layers attend over the window at 32k, its global ones over everything") {
  // google/gemma-2-2b: sliding_window 4096, 26 layers; Gemma2Config's layer_types: "sliding_attention" if
  // bool((i + 1) % 2) — layers 0, 2, 4, ... local, 1, 3, 5, ... global.
  const ModelSpec gemma = hf_model("gemma2-2b");
  const std::vector<std::int64_t> windows = block_windows(gemma);
  REQUIRE(windows.size() == 26);
  for (std::size_t i = 0; i < windows.size(); ++i) CHECK(windows[i] == (i % 2 == 0 ? 4096 : 0));
  const LayerSpec& local = gemma.layers[1];
  const LayerSpec& global = gemma.layers[2];
  // 8 heads of 256: 4·2048 attention FLOPs per token per position (QKᵀ and P·V).
  const double per_position = local.flops.attention_flops_per_token_per_position;
  CHECK(per_position == 4.0 * 8 * 256);
  // At 32k tokens each local query attends to the last 4096 keys: Σ min(i + 1, w) = w·s − w(w − 1)/2, counted as
  // w·s − w²/2 (FlashAttention's window_size skips the blocks outside it).
  const double s = 32768, w = 4096;
  CHECK(local.forward_flops_per_token(32768, true) ==
        doctest::Approx(local.flops.matmul_flops_per_token + per_position * (w - w * w / (2 * s))));
  CHECK(global.forward_flops_per_token(32768, true) ==
        doctest::Approx(global.flops.matmul_flops_per_token + per_position * s / 2));
  // The op-level model's flash kernel does the same work: 4·s·(w − w²/(2s))·heads·head_dim for one sequence.
  CHECK(flash_attention_flops(gemma, 1, 32768) == doctest::Approx(s * per_position * (w - w * w / (2 * s))));
  CHECK(flash_attention_flops(gemma, 2, 32768) == doctest::Approx(s * per_position * s / 2));
  // At or below the window nothing changes: a local layer costs what a global one does.
  for (const std::int64_t seq : {std::int64_t{2048}, std::int64_t{4096}}) {
    CAPTURE(seq);
    CHECK(local.forward_flops_per_token(seq, true) == global.forward_flops_per_token(seq, true));
    CHECK(flash_attention_flops(gemma, 1, seq) == flash_attention_flops(gemma, 2, seq));
  }
  // What the layers keep for backward is the same, window or not (the note: a log-sum-exp per query with flash,
  // every masked score with materialised attention).
  for (const bool flash : {true, false}) {
    CHECK(local.activation_bytes_per_token(32768, 2, flash, ActivationCheckpointing::none) ==
          global.activation_bytes_per_token(32768, 2, flash, ActivationCheckpointing::none));
  }
  // The whole model: 13 local layers each save per_position · (s/2 − (w − w²/(2s))) FLOPs per token.
  auto unwindowed = read_json_file("examples/hf/gemma2-2b.json");
  unwindowed["sliding_window"] = nullptr;
  const ModelSpec full = from_document(unwindowed);
  for (const std::int64_t window : block_windows(full)) CHECK(window == 0);
  CHECK(full.forward_flops_per_token(32768, true) - gemma.forward_flops_per_token(32768, true) ==
        doctest::Approx(13 * per_position * (s / 2 - (w - w * w / (2 * s)))));
  CHECK(full.forward_flops_per_token(4096, true) == gemma.forward_flops_per_token(4096, true));
  CHECK(full.param_count() == gemma.param_count());
}

TEST_CASE("sliding windows: Gemma 3 slides five layers of six (sliding_window_pattern), or as layer_types lists") {
  // google/gemma-3-1b-pt: 26 layers, sliding_window 512, sliding_window_pattern 6: layers 5, 11, 17 and 23 global
  // (modeling_gemma3.py: is_sliding = bool((layer_idx + 1) % config.sliding_window_pattern)).
  const ModelSpec gemma = hf_model("gemma3-1b");
  const std::vector<std::int64_t> windows = block_windows(gemma);
  REQUIRE(windows.size() == 26);
  for (std::size_t i = 0; i < windows.size(); ++i) CHECK(windows[i] == (i % 6 == 5 ? 0 : 512));
  // Newer configs list the layers instead; the list wins over the pattern.
  auto listed = read_json_file("examples/hf/gemma3-1b.json");
  listed["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 26; ++i) listed["layer_types"].push_back(i < 2 ? "full_attention" : "sliding_attention");
  const std::vector<std::int64_t> from_list = block_windows(from_document(listed));
  for (std::size_t i = 0; i < from_list.size(); ++i) CHECK(from_list[i] == (i < 2 ? 0 : 512));
  // A list of the wrong length or with an unknown entry is refused in one line, naming the field.
  listed["layer_types"].erase(0);
  CHECK_THROWS_WITH_AS(from_document(listed), doctest::Contains("field 'layer_types'"), InputError);
  listed["layer_types"].push_back("chunked_attention");
  CHECK_THROWS_WITH_AS(from_document(listed), doctest::Contains("field 'layer_types'"), InputError);
}

TEST_CASE("sliding windows: Mistral's window on every layer; sliding_window null changes nothing") {
  // mistralai/Mistral-7B-v0.1: sliding_window 4096 on all 32 layers (MistralAttention).
  const ModelSpec v01 = hf_model("mistral-7b");
  for (const std::int64_t window : block_windows(v01)) CHECK(window == 4096);
  // v0.2 and later name null: every layer attends in full, exactly as the same shapes under LlamaForCausalLM.
  auto document = read_json_file("examples/hf/mistral-7b.json");
  document["sliding_window"] = nullptr;
  const ModelSpec unwindowed = from_document(document);
  for (const std::int64_t window : block_windows(unwindowed)) CHECK(window == 0);
  auto as_llama = document;
  as_llama["architectures"] = {"LlamaForCausalLM"};
  as_llama["model_type"] = "llama";
  const ModelSpec llama = from_document(as_llama);
  CHECK(unwindowed.forward_flops_per_token(32768, true) == llama.forward_flops_per_token(32768, true));
  CHECK(unwindowed.param_count() == llama.param_count());
  CHECK(v01.forward_flops_per_token(4096, true) == llama.forward_flops_per_token(4096, true));
  CHECK(v01.forward_flops_per_token(32768, true) < llama.forward_flops_per_token(32768, true));
  // MistralConfig's default when the key is absent is 4096.
  document.erase("sliding_window");
  for (const std::int64_t window : block_windows(from_document(document))) CHECK(window == 4096);
}

TEST_CASE("sliding windows: Qwen2 slides only with use_sliding_window, from max_window_layers on") {
  // Qwen/Qwen2-0.5B: use_sliding_window false — no layer slides whatever sliding_window says.
  const ModelSpec qwen = hf_model("qwen2-0.5b");
  for (const std::int64_t window : block_windows(qwen)) CHECK(window == 0);
  auto document = read_json_file("examples/hf/qwen2-0.5b.json");
  document["use_sliding_window"] = true;
  document["sliding_window"] = 4096;
  document["max_window_layers"] = 21;  // Qwen2Config: "sliding_attention" if i >= max_window_layers
  const std::vector<std::int64_t> windows = block_windows(from_document(document));
  REQUIRE(windows.size() == 24);
  for (std::size_t i = 0; i < windows.size(); ++i) CHECK(windows[i] == (i >= 21 ? 4096 : 0));
}

TEST_CASE("sliding windows: gpt-oss reads any layer_types list; a null window leaves every layer full") {
  auto document = read_json_file("examples/hf/gpt-oss-20b.json");
  document["layer_types"][1] = "sliding_attention";  // two sliding layers in a row
  const std::vector<std::int64_t> windows = block_windows(from_document(document));
  CHECK(windows[0] == 128);
  CHECK(windows[1] == 128);
  CHECK(windows[2] == 128);
  CHECK(windows[3] == 0);
  document["sliding_window"] = nullptr;  // modeling_gpt_oss.py: sliding_window=None for every layer
  for (const std::int64_t window : block_windows(from_document(document))) CHECK(window == 0);
}

TEST_CASE("sliding windows: Phi-3's window on every layer (Phi-3-mini-4k: 2047); null or absent, none") {
  // microsoft/Phi-3-mini-4k-instruct: sliding_window 2047; Phi3Attention passes it to every layer's attention.
  const ModelSpec phi3 = hf_model("phi3-mini-4k");
  for (const std::int64_t window : block_windows(phi3)) CHECK(window == 2047);
  // 32 heads of 96: at 4096 tokens each query attends to the last 2047 keys, w·s − w²/2 of the s² scores.
  const LayerSpec& block = phi3.layers[1];
  const double per_position = 4.0 * 32 * 96, s = 4096, w = 2047;
  CHECK(block.flops.attention_flops_per_token_per_position == per_position);
  CHECK(flash_attention_flops(phi3, 1, 4096) == doctest::Approx(s * per_position * (w - w * w / (2 * s))));
  auto document = read_json_file("examples/hf/phi3-mini-4k.json");
  document["sliding_window"] = nullptr;
  for (const std::int64_t window : block_windows(from_document(document))) CHECK(window == 0);
  document.erase("sliding_window");  // Phi3Config's default: None
  for (const std::int64_t window : block_windows(from_document(document))) CHECK(window == 0);
}

TEST_CASE("sliding windows: Qwen3 as Qwen2 (use_sliding_window false: none), Qwen3-MoE on every layer") {
  // Qwen/Qwen3-8B: use_sliding_window false, sliding_window null — no layer slides.
  for (const std::int64_t window : block_windows(hf_model("qwen3-8b"))) CHECK(window == 0);
  auto document = read_json_file("examples/hf/qwen3-8b.json");
  document["sliding_window"] = 4096;
  for (const std::int64_t window : block_windows(from_document(document))) CHECK(window == 0);  // not used
  document["use_sliding_window"] = true;  // Qwen3Config: sliding from max_window_layers (36 here: none) on
  for (const std::int64_t window : block_windows(from_document(document))) CHECK(window == 0);
  document["max_window_layers"] = 30;
  const std::vector<std::int64_t> windows = block_windows(from_document(document));
  REQUIRE(windows.size() == 36);
  for (std::size_t i = 0; i < windows.size(); ++i) CHECK(windows[i] == (i >= 30 ? 4096 : 0));
  // Qwen/Qwen3-30B-A3B: no layer slides; with use_sliding_window every layer does (Qwen3MoeAttention).
  auto moe = read_json_file("examples/hf/qwen3-30b-a3b.json");
  for (const std::int64_t window : block_windows(from_document(moe))) CHECK(window == 0);
  moe["use_sliding_window"] = true;
  moe["sliding_window"] = 4096;
  for (const std::int64_t window : block_windows(from_document(moe))) CHECK(window == 4096);
  moe.erase("sliding_window");  // Qwen3MoeConfig's default, 4096
  for (const std::int64_t window : block_windows(from_document(moe))) CHECK(window == 4096);
}

TEST_CASE("chunked attention: Llama 4 Scout's RoPE layers attend within 8192-token chunks, its NoPE layers in full") {
  // meta-llama/Llama-4-Scout-17B-16E: attention_chunk_size 8192; no_rope_layers 1, 1, 1, 0, ...: layers 3, 7, ...
  // (NoPE) attend to every earlier position, the rest within their chunk (Note [Chunked attention]).
  const ModelSpec scout = load_model("examples/hf/llama4-scout-17b-16e.json");
  std::vector<std::size_t> blocks;
  for (std::size_t i = 0; i < scout.layers.size(); ++i) {
    if (scout.layers[i].name.starts_with("language_model.model.layers.")) blocks.push_back(i);
  }
  REQUIRE(blocks.size() == 48);
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const LayerSpec& layer = scout.layers[blocks[b]];
    CAPTURE(b);
    CHECK(layer.flops.attention_window == (b % 4 == 3 ? 0 : 8192));
    CHECK(layer.flops.attention_chunked == (b % 4 != 3));
    CHECK(layer.kernels->attention->window == layer.flops.attention_window);
    CHECK(layer.kernels->attention->chunked == layer.flops.attention_chunked);
  }
  // One layer's attention at 16384 tokens, by hand: 40 heads of 128, so QKᵀ and P·V cost 4·40·128 = 20480 FLOPs per
  // token per position. A chunked layer's two chunks are causal 8192 × 8192 blocks: 2 · 8192²/2 of the 16384² scores,
  // a quarter; the NoPE layer does the causal half.
  const LayerSpec& chunked = scout.layers[blocks[0]];
  const LayerSpec& global = scout.layers[blocks[3]];
  CHECK(chunked.flops.attention_flops_per_token_per_position == 20480);
  CHECK(chunked.forward_flops_per_token(16384, true) - chunked.flops.matmul_flops_per_token ==
        doctest::Approx(20480.0 * 16384 / 4));  // 83,886,080 per token
  CHECK(global.forward_flops_per_token(16384, true) - global.flops.matmul_flops_per_token ==
        doctest::Approx(20480.0 * 16384 / 2));
  // The op-level flash kernel for one 16384-token sequence: 4·s²·head_dim·heads·¼ = 1,374,389,534,720 FLOPs.
  CHECK(flash_attention_flops(scout, blocks[0], 16384) == doctest::Approx(1'374'389'534'720.0));
  CHECK(flash_attention_flops(scout, blocks[3], 16384) == doctest::Approx(2 * 1'374'389'534'720.0));
  // Within one chunk a chunked layer is a causal one; past a whole chunk the rest is a causal block of its own:
  // 12288 = 8192 + 4096 tokens give (8192² + 4096²)/(2 · 12288²) = 5/18 of s².
  CHECK(flash_attention_flops(scout, blocks[0], 8192) ==
        doctest::Approx(flash_attention_flops(scout, blocks[3], 8192)));
  CHECK(masked_attention_share(12288, 8192, true, true) == doctest::Approx(5.0 / 18));
  CHECK(masked_attention_share(8192, 8192, true, true) == 0.5);
  // layer_types, when listed, wins over no_rope_layers; a null chunk size with chunked layers is refused.
  auto document = read_json_file("examples/hf/llama4-scout-17b-16e.json");
  auto& text = document["text_config"];
  text["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 48; ++i) text["layer_types"].push_back(i == 0 ? "chunked_attention" : "full_attention");
  const ModelSpec listed = config_model(document);
  CHECK(listed.forward_flops_per_token(16384, true) > scout.forward_flops_per_token(16384, true));
  text.erase("layer_types");
  text["attention_chunk_size"] = nullptr;
  CHECK_THROWS_WITH_AS(config_model(document), doctest::Contains("field 'text_config.attention_chunk_size'"),
                       InputError);
  CHECK(listed.param_count() == scout.param_count());
}
