// Tests of sliding-window layers read from Hugging Face configs (Note [Sliding-window attention] in kernel_spec.h):
// Gemma 2's alternation, Gemma 3's five local to one global, Mistral's every-layer window, Qwen2's use_sliding_window
// from max_window_layers on, gpt-oss's layer_types; only windowed layers change, and only past the window.
#include <doctest/doctest.h>

#include <string>

#include "decoder_builder.h"
#include "errors.h"
#include "hf_config.h"
#include "hf_example_models.h"
#include "json_input.h"
#include "pass_kernels.h"
#include "training.h"

using namespace shardplan;
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
