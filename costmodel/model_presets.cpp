// The preset table: hyper-parameters from each model's published Hugging Face config.json or paper.
#include "model_presets.h"

#include <optional>
#include <utility>

#include "decoder_builder.h"
#include "errors.h"
#include "hf_config.h"
#include "model_source.h"
#include "name_suggest.h"

namespace shardplan {
namespace {

DecoderArchitecture llama(std::int64_t vocab, std::int64_t hidden, std::int64_t intermediate, std::int64_t layers,
                          std::int64_t heads, std::int64_t kv_heads, std::int64_t max_positions) {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::llama;
  arch.vocab_size = vocab;
  arch.hidden_size = hidden;
  arch.intermediate_size = intermediate;
  arch.num_layers = layers;
  arch.num_heads = heads;
  arch.num_kv_heads = kv_heads;
  arch.max_position_embeddings = max_positions;
  return arch;
}

DecoderArchitecture gpt(std::int64_t vocab, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                        std::int64_t max_positions) {
  DecoderArchitecture arch = llama(vocab, hidden, 4 * hidden, layers, heads, heads, max_positions);
  arch.family = DecoderArchitecture::Family::gpt2;
  arch.tie_word_embeddings = true;
  arch.dropout = 0.1;  // GPT-2 config.json: resid_pdrop = attn_pdrop = embd_pdrop = 0.1
  return arch;
}

DecoderArchitecture tied(DecoderArchitecture arch) {
  arch.tie_word_embeddings = true;
  return arch;
}

// A preset given as the shape keys of its Hugging Face config.json, read by the same importer as a config file, so a
// preset and its config cannot disagree (MoE, MLA and head_dim keys included).
DecoderArchitecture hf(const char* name, const nlohmann::json& config) {
  return architecture_from_hf_config(config, std::string("preset ") + name);
}

// Llama 3.1's RoPE scaling (rope_type llama3: factor 8 over 8192 original positions, 131072 in all).
const nlohmann::json& llama31_rope() {
  static const nlohmann::json rope = {{"rope_type", "llama3"},
                                      {"factor", 8.0},
                                      {"low_freq_factor", 1.0},
                                      {"high_freq_factor", 4.0},
                                      {"original_max_position_embeddings", 8192}};
  return rope;
}

nlohmann::json llama31(std::int64_t hidden, std::int64_t intermediate, std::int64_t layers, std::int64_t heads,
                       bool tie) {
  return {{"architectures", nlohmann::json::array({"LlamaForCausalLM"})}, {"vocab_size", 128256},  {"hidden_size", hidden},
          {"intermediate_size", intermediate},    {"num_hidden_layers", layers}, {"num_attention_heads", heads},
          {"num_key_value_heads", 8},             {"max_position_embeddings", 131072},
          {"rope_scaling", llama31_rope()},       {"tie_word_embeddings", tie}};
}

// Qwen2ForCausalLM (q/k/v biases); Qwen2.5's configs name 32768 positions (YaRN factor 4 to 131072 is the model
// cards' recipe for longer inputs, not in config.json).
nlohmann::json qwen25(std::int64_t vocab, std::int64_t hidden, std::int64_t intermediate, std::int64_t layers,
                      std::int64_t heads, std::int64_t kv_heads, bool tie) {
  return {{"architectures", nlohmann::json::array({"Qwen2ForCausalLM"})}, {"vocab_size", vocab},     {"hidden_size", hidden},
          {"intermediate_size", intermediate},    {"num_hidden_layers", layers}, {"num_attention_heads", heads},
          {"num_key_value_heads", kv_heads},      {"max_position_embeddings", 32768}, {"tie_word_embeddings", tie}};
}

// Qwen3ForCausalLM: head_dim 128 whatever the width, q/k norms.
nlohmann::json qwen3(std::int64_t hidden, std::int64_t intermediate, std::int64_t layers, std::int64_t heads,
                     bool tie) {
  return {{"architectures", nlohmann::json::array({"Qwen3ForCausalLM"})}, {"vocab_size", 151936},  {"hidden_size", hidden},
          {"intermediate_size", intermediate},    {"num_hidden_layers", layers}, {"num_attention_heads", heads},
          {"num_key_value_heads", 8},             {"head_dim", 128},        {"max_position_embeddings", 40960},
          {"tie_word_embeddings", tie}};
}

// Mistral-7B-v0.1 slides a 4096-token window over every layer; v0.3's config.json names sliding_window null
// (Note [Sliding-window attention]).
nlohmann::json mistral(std::int64_t vocab, std::optional<std::int64_t> sliding_window) {
  nlohmann::json config = {{"architectures", nlohmann::json::array({"MistralForCausalLM"})}, {"vocab_size", vocab},
                           {"hidden_size", 4096},        {"intermediate_size", 14336},
                           {"num_hidden_layers", 32},    {"num_attention_heads", 32},
                           {"num_key_value_heads", 8},   {"max_position_embeddings", 32768}};
  config["sliding_window"] = sliding_window ? nlohmann::json(*sliding_window) : nlohmann::json(nullptr);
  return config;
}

nlohmann::json mixtral(std::int64_t hidden, std::int64_t intermediate, std::int64_t layers, std::int64_t heads,
                       std::int64_t positions) {
  return {{"architectures", nlohmann::json::array({"MixtralForCausalLM"})}, {"vocab_size", 32000},      {"hidden_size", hidden},
          {"intermediate_size", intermediate},      {"num_hidden_layers", layers}, {"num_attention_heads", heads},
          {"num_key_value_heads", 8},               {"num_local_experts", 8},    {"num_experts_per_tok", 2},
          {"max_position_embeddings", positions}};
}

// deepseek-ai/DeepSeek-V3 config.json (examples/hf/deepseek-v3.json): MLA, 256 routed experts and one shared, the
// first 3 layers dense, YaRN factor 40 over 4096 positions.
nlohmann::json deepseek_v3() {
  return {{"architectures", nlohmann::json::array({"DeepseekV3ForCausalLM"})},
          {"vocab_size", 129280},
          {"hidden_size", 7168},
          {"intermediate_size", 18432},
          {"moe_intermediate_size", 2048},
          {"num_hidden_layers", 61},
          {"num_attention_heads", 128},
          {"num_key_value_heads", 128},
          {"n_shared_experts", 1},
          {"n_routed_experts", 256},
          {"num_experts_per_tok", 8},
          {"first_k_dense_replace", 3},
          {"n_group", 8},
          {"topk_group", 4},
          {"kv_lora_rank", 512},
          {"q_lora_rank", 1536},
          {"qk_nope_head_dim", 128},
          {"qk_rope_head_dim", 64},
          {"v_head_dim", 128},
          {"max_position_embeddings", 163840},
          {"rope_scaling",
           {{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096}, {"beta_fast", 32},
            {"beta_slow", 1}}},
          {"tie_word_embeddings", false}};
}

// Qwen/Qwen2-VL-7B-Instruct's config.json, shape keys: the Qwen2-7B text keys at the top level and its
// vision_config (Qwen2VLVisionConfig: embed_dim 1280, mlp_ratio 4, hidden_size 3584 — the merger's output).
nlohmann::json qwen2_vl_7b() {
  return {{"architectures", nlohmann::json::array({"Qwen2VLForConditionalGeneration"})},
          {"hidden_size", 3584}, {"intermediate_size", 18944}, {"num_hidden_layers", 28}, {"num_attention_heads", 28},
          {"num_key_value_heads", 4}, {"vocab_size", 152064}, {"max_position_embeddings", 32768},
          {"tie_word_embeddings", false}, {"use_sliding_window", false},
          {"vision_config", {{"depth", 32}, {"embed_dim", 1280}, {"mlp_ratio", 4}, {"num_heads", 16},
                             {"hidden_size", 3584}, {"patch_size", 14}, {"spatial_merge_size", 2},
                             {"temporal_patch_size", 2}}}};
}

// Qwen/Qwen2.5-VL-7B-Instruct's config.json (examples/hf/qwen2.5-vl-7b-instruct.json), shape keys: the same text
// keys with 128000 positions, and Qwen2_5_VLVisionConfig's tower of 1280 with its windowed blocks.
nlohmann::json qwen25_vl_7b() {
  nlohmann::json config = qwen2_vl_7b();
  config["architectures"] = nlohmann::json::array({"Qwen2_5_VLForConditionalGeneration"});
  config["max_position_embeddings"] = 128000;
  config["vision_config"] = {{"depth", 32}, {"hidden_size", 1280}, {"intermediate_size", 3420}, {"num_heads", 16},
                             {"out_hidden_size", 3584}, {"patch_size", 14},
                             {"spatial_merge_size", 2}, {"temporal_patch_size", 2}, {"window_size", 112},
                             {"fullatt_block_indexes", {7, 15, 23, 31}}};
  return config;
}

// meta-llama/Llama-4-Scout-17B-16E's config.json (examples/hf/llama4-scout-17b-16e.json), shape keys: 48 MoE layers
// of 16 experts and a shared expert, chunked attention on the RoPE layers (Llama4TextConfig's defaults for
// moe_layers and no_rope_layers: every layer, every 4th NoPE), and the 34-layer vision encoder.
nlohmann::json llama4_scout() {
  return {{"architectures", nlohmann::json::array({"Llama4ForConditionalGeneration"})},
          {"text_config",
           {{"hidden_size", 5120}, {"intermediate_size", 8192}, {"intermediate_size_mlp", 16384},
            {"num_hidden_layers", 48}, {"num_attention_heads", 40}, {"num_key_value_heads", 8}, {"head_dim", 128},
            {"num_local_experts", 16}, {"num_experts_per_tok", 1}, {"interleave_moe_layer_step", 1},
            {"vocab_size", 202048}, {"max_position_embeddings", 262144}, {"attention_chunk_size", 8192},
            {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}}},
          {"vision_config",
           {{"hidden_size", 1408}, {"intermediate_size", 5632}, {"num_hidden_layers", 34},
            {"num_attention_heads", 16}, {"num_channels", 3}, {"image_size", 336}, {"patch_size", 14},
            {"pixel_shuffle_ratio", 0.5}, {"projector_input_dim", 4096}, {"projector_output_dim", 4096},
            {"vision_output_dim", 4096}}}};
}

ModelPreset multimodal(const char* name, const char* description, nlohmann::json document, std::int64_t seq_len) {
  ModelPreset preset;
  preset.name = name;
  preset.description = description;
  preset.default_seq_len = seq_len;
  preset.hf_document = std::move(document);
  return preset;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  // Function-local so there is no global initialisation order to worry about; built once.
  static const std::vector<ModelPreset> presets = {
      {"llama2-7b", "Llama 2 7B (meta-llama/Llama-2-7b-hf config.json)",
       llama(32000, 4096, 11008, 32, 32, 32, 4096), 4096},
      {"llama2-13b", "Llama 2 13B (meta-llama/Llama-2-13b-hf config.json)",
       llama(32000, 5120, 13824, 40, 40, 40, 4096), 4096},
      {"llama2-70b", "Llama 2 70B, GQA with 8 kv heads (meta-llama/Llama-2-70b-hf config.json)",
       llama(32000, 8192, 28672, 80, 64, 8, 4096), 4096},
      {"llama3-8b", "Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json)",
       llama(128256, 4096, 14336, 32, 32, 8, 8192), 8192},
      {"llama3-70b", "Llama 3 70B (meta-llama/Meta-Llama-3-70B config.json)",
       llama(128256, 8192, 28672, 80, 64, 8, 8192), 8192},
      {"llama3.1-405b", "Llama 3.1 405B (meta-llama/Llama-3.1-405B config.json)",
       llama(128256, 16384, 53248, 126, 128, 8, 131072), 8192},
      // Tied input and output embeddings (config.json: tie_word_embeddings = true); 1,235,814,400 parameters. The
      // ~1B model the GPU check trains at world size 1.
      {"llama3.2-1b", "Llama 3.2 1B, tied embeddings (meta-llama/Llama-3.2-1B config.json)", tied(llama(128256, 2048, 8192, 16, 32, 8, 131072)), 8192},
      // Exact counts in tests/unit/test_model_presets.cpp, each against the checkpoint's published total.
      {"llama3.1-8b", "Llama 3.1 8B, RoPE scaled to 131072 (meta-llama/Llama-3.1-8B config.json)",
       hf("llama3.1-8b", llama31(4096, 14336, 32, 32, false)), 8192},
      {"llama3.1-70b", "Llama 3.1 70B, RoPE scaled to 131072 (meta-llama/Llama-3.1-70B config.json)",
       hf("llama3.1-70b", llama31(8192, 28672, 80, 64, false)), 8192},
      {"llama3.2-3b", "Llama 3.2 3B, tied embeddings (meta-llama/Llama-3.2-3B config.json)",
       hf("llama3.2-3b", llama31(3072, 8192, 28, 24, true)), 8192},
      {"llama3.3-70b", "Llama 3.3 70B, Llama 3.1 70B's shape (meta-llama/Llama-3.3-70B-Instruct config.json)",
       hf("llama3.3-70b", llama31(8192, 28672, 80, 64, false)), 8192},
      {"mistral-7b", "Mistral 7B v0.1, 4096-token sliding window (mistralai/Mistral-7B-v0.1 config.json)",
       hf("mistral-7b", mistral(32000, 4096)), 8192},
      {"mistral-7b-v0.3", "Mistral 7B v0.3, 32768-token vocabulary (mistralai/Mistral-7B-v0.3 config.json)",
       hf("mistral-7b-v0.3", mistral(32768, std::nullopt)), 8192},
      {"mixtral-8x7b", "Mixtral 8x7B, 8 experts top-2 (mistralai/Mixtral-8x7B-v0.1 config.json)",
       hf("mixtral-8x7b", mixtral(4096, 14336, 32, 32, 32768)), 8192},
      {"mixtral-8x22b", "Mixtral 8x22B, 8 experts top-2 (mistralai/Mixtral-8x22B-v0.1 config.json)",
       hf("mixtral-8x22b", mixtral(6144, 16384, 56, 48, 65536)), 8192},
      {"qwen2.5-0.5b", "Qwen2.5 0.5B, tied (Qwen/Qwen2.5-0.5B config.json)",
       hf("qwen2.5-0.5b", qwen25(151936, 896, 4864, 24, 14, 2, true)), 4096},
      {"qwen2.5-1.5b", "Qwen2.5 1.5B, tied (Qwen/Qwen2.5-1.5B config.json)",
       hf("qwen2.5-1.5b", qwen25(151936, 1536, 8960, 28, 12, 2, true)), 4096},
      {"qwen2.5-3b", "Qwen2.5 3B, tied (Qwen/Qwen2.5-3B config.json)",
       hf("qwen2.5-3b", qwen25(151936, 2048, 11008, 36, 16, 2, true)), 4096},
      {"qwen2.5-7b", "Qwen2.5 7B (Qwen/Qwen2.5-7B config.json)",
       hf("qwen2.5-7b", qwen25(152064, 3584, 18944, 28, 28, 4, false)), 4096},
      {"qwen2.5-14b", "Qwen2.5 14B (Qwen/Qwen2.5-14B config.json)",
       hf("qwen2.5-14b", qwen25(152064, 5120, 13824, 48, 40, 8, false)), 4096},
      {"qwen2.5-32b", "Qwen2.5 32B (Qwen/Qwen2.5-32B config.json)",
       hf("qwen2.5-32b", qwen25(152064, 5120, 27648, 64, 40, 8, false)), 4096},
      {"qwen2.5-72b", "Qwen2.5 72B (Qwen/Qwen2.5-72B config.json)",
       hf("qwen2.5-72b", qwen25(152064, 8192, 29568, 80, 64, 8, false)), 4096},
      {"qwen3-4b", "Qwen3 4B, tied, head_dim 128, q/k norms (Qwen/Qwen3-4B config.json)",
       hf("qwen3-4b", qwen3(2560, 9728, 36, 32, true)), 4096},
      {"qwen3-8b", "Qwen3 8B, head_dim 128, q/k norms (Qwen/Qwen3-8B config.json)",
       hf("qwen3-8b", qwen3(4096, 12288, 36, 32, false)), 4096},
      {"qwen3-32b", "Qwen3 32B, head_dim 128, q/k norms (Qwen/Qwen3-32B config.json)",
       hf("qwen3-32b", qwen3(5120, 25600, 64, 64, false)), 4096},
      {"qwen3-30b-a3b", "Qwen3 30B-A3B, 128 experts top-8 (Qwen/Qwen3-30B-A3B config.json)",
       hf("qwen3-30b-a3b", {{"architectures", nlohmann::json::array({"Qwen3MoeForCausalLM"})}, {"vocab_size", 151936},
                            {"hidden_size", 2048}, {"intermediate_size", 6144}, {"moe_intermediate_size", 768},
                            {"num_hidden_layers", 48}, {"num_attention_heads", 32}, {"num_key_value_heads", 4},
                            {"head_dim", 128}, {"num_experts", 128}, {"num_experts_per_tok", 8},
                            {"max_position_embeddings", 40960}, {"tie_word_embeddings", false}}),
       4096},
      {"deepseek-v3", "DeepSeek-V3 671B: MLA, 256 experts top-8 (deepseek-ai/DeepSeek-V3 config.json; the "
                      "multi-token-prediction layer is not part of the HF model)",
       hf("deepseek-v3", deepseek_v3()), 4096},
      // Vision and language models: exact counts in tests/unit/test_model_presets.cpp against the checkpoints.
      multimodal("qwen2-vl-7b",
                 "Qwen2-VL 7B: vision tower, patch merger, Qwen2 7B (Qwen/Qwen2-VL-7B-Instruct config.json)",
                 qwen2_vl_7b(), 4096),
      multimodal("qwen2.5-vl-7b",
                 "Qwen2.5-VL 7B: windowed vision tower, Qwen2 7B (Qwen/Qwen2.5-VL-7B-Instruct config.json)",
                 qwen25_vl_7b(), 4096),
      multimodal("llama4-scout-17b-16e",
                 "Llama 4 Scout 17B-16E: 16 experts and a shared one, chunked attention, vision encoder "
                 "(meta-llama/Llama-4-Scout-17B-16E config.json)",
                 llama4_scout(), 8192),
      {"gpt3-175b", "GPT-3 175B (Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads, context 2048)",
       gpt(50257, 12288, 96, 96, 2048), 2048},
      {"gpt2", "GPT-2 124M (openai-community/gpt2 config.json)", gpt(50257, 768, 12, 12, 1024), 1024},
      // Byte-level vocabulary so the CPU executor can train on raw text; ~0.8 M parameters (~3 MB in fp32).
      {"tiny-llama", "a llama-family toy for the executor: 4 layers, hidden 128, GQA 4/2 heads, byte vocabulary",
       llama(256, 128, 352, 4, 4, 2, 512), 128},
  };
  return presets;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& preset : model_presets()) names.push_back(preset.name);
  return names;
}

std::optional<ModelPreset> find_model_preset(const std::string& name) {
  for (const auto& preset : model_presets()) {
    if (preset.name == name) return preset;
  }
  return std::nullopt;
}

ModelSpec preset_model(const std::string& name) {
  const auto preset = find_model_preset(name);
  if (!preset) {
    throw InputError("unknown model '" + name + "'" + did_you_mean(name, model_preset_names()) +
                     "; give a preset name (see `shardplan models`), a model JSON or a Hugging Face config.json");
  }
  ModelSpec model = preset->hf_document
                        ? model_from_document(*preset->hf_document, preset->name, "preset " + preset->name)
                        : build_decoder(preset->name, preset->architecture, "preset " + preset->name);
  model.default_seq_len = preset->default_seq_len;
  return model;
}

}  // namespace shardplan
