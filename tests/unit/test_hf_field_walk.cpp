// The field walk of issue 35 over the shipped configs of the newest readers (Note [Shape fields] in hf_config.cpp,
// test_hf_shape_fields.cpp, walks the decoders' shape fields on small configs): Qwen2-VL and Qwen2.5-VL, Llama 4
// (nested text_config and vision_config), and the attention-pattern fields — gpt-oss's, Gemma 2's and 3's, Mistral's,
// Mixtral's, Qwen2's, Qwen3's and Phi-3's sliding windows, Llama 4's chunks — which change a layer's work, not a
// tensor. Every key a config carries is either walked (set to another value, the model must change — a tensor, a
// layer's work or kernels, its tokens — or the import must refuse it in one line naming the field), walked on the
// same architecture by test_hf_shape_fields.cpp, or listed here as deliberately ignored, with why. A key a new release
// adds, or a walked field the import drops, fails here. The keys and their meaning are transformers' own
// (huggingface/transformers, src/transformers/models/: gpt_oss/, gemma2/, gemma3/, mistral/, mixtral/, qwen2/,
// qwen3/, qwen3_moe/, phi3/, qwen2_vl/, qwen2_5_vl/, llama4/ — configuration_*.py and modeling_*.py).
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "json_input.h"
#include "model_presets.h"
#include "model_source.h"

namespace {

using nlohmann::json;

struct Walked {
  std::string pointer;          // "/sliding_window", "/vision_config/depth"
  json value;                   // another valid value
  json context = json::object();  // pointer → value, set on the base and the changed config alike
  json also = json::object();     // pointer → value, set on the changed config only (a key that must agree)
};

struct ConfigWalk {
  std::string name;
  json config;
  std::vector<Walked> walked;
  std::vector<std::string> shape_walked;                      // keys test_hf_shape_fields.cpp walks on this class
  std::vector<std::pair<std::string, std::string>> ignored;  // pointer, why
};

// Keys no reader models, whatever the architecture, and why.
const std::vector<std::pair<std::string, std::string>>& no_effect_keys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"architectures", "selects the reader (model_from_document)"},
      {"model_type", "selects the reader, or names a nested config's class"},
      {"bos_token_id", "a token id: an input, not a shape"},
      {"eos_token_id", "a token id"},
      {"pad_token_id", "a token id"},
      {"image_token_id", "a token id"},
      {"video_token_id", "a token id"},
      {"vision_start_token_id", "a token id"},
      {"vision_end_token_id", "a token id"},
      {"vision_token_id", "a token id"},
      {"boi_token_index", "a token id"},
      {"eoi_token_index", "a token id"},
      {"image_token_index", "a token id"},
      {"torch_dtype", "the plan's precision is --precision, not the checkpoint's dtype"},
      {"transformers_version", "provenance"},
      {"use_cache", "the KV cache of generation: no training work"},
      {"initializer_range", "initial values, not shapes"},
      {"rms_norm_eps", "a norm's epsilon: numerics only"},
      {"norm_eps", "a norm's epsilon"},
      {"rope_theta", "RoPE's base frequency: the same rotation kernels"},
      {"max_position_embeddings", "bounds --seq-len (Note [Long context] in model_spec.h): no tensor or layer work"},
      {"rope_scaling", "bounds --seq-len with its factor (Note [Long context]): no tensor or layer work"},
      {"hidden_act", "one activation kernel, priced alike whichever function it names"},
      {"hidden_activation", "Gemma's name for hidden_act"},
      {"attention_dropout", "0.0 in every release; attention dropout masks are not counted for these families"},
      {"output_router_logits", "returns the router's logits: no tensor or work"},
      {"router_aux_loss_coef", "a loss weight"},
      {"router_jitter_noise", "router noise at training: no tensor or work"},
      {"cache_implementation", "the KV cache of generation"},
  };
  return keys;
}

// Every key of the config as a pointer; text_config and vision_config are walked into, other objects (rope_scaling,
// quantization_config) are one key.
void collect_keys(const json& object, const std::string& prefix, std::vector<std::string>& keys) {
  for (const auto& [key, value] : object.items()) {
    if (value.is_object() && (key == "text_config" || key == "vision_config")) {
      collect_keys(value, prefix + "/" + key, keys);
    } else {
      keys.push_back(prefix + "/" + key);
    }
  }
}

std::string last_key(const std::string& pointer) { return pointer.substr(pointer.rfind('/') + 1); }

// "/text_config/moe_layers" → "text_config.moe_layers", as the readers name nested fields in errors.
std::string field_name(std::string pointer) {
  pointer.erase(0, 1);
  std::replace(pointer.begin(), pointer.end(), '/', '.');
  return pointer;
}

json with(json config, const json& changes) {
  for (const auto& [pointer, value] : changes.items()) config[json::json_pointer(pointer)] = value;
  return config;
}

json layer_list(int layers, const char* type) { return json(std::vector<std::string>(layers, type)); }

std::vector<int> odd_layers(int layers) {
  std::vector<int> odd;
  for (int i = 1; i < layers; i += 2) odd.push_back(i);
  return odd;
}

const std::vector<std::string> kLlamaShape = {"/vocab_size",          "/hidden_size",         "/intermediate_size",
                                              "/num_hidden_layers",   "/num_attention_heads", "/num_key_value_heads",
                                              "/tie_word_embeddings"};

template <typename T>
std::vector<T> plus(std::vector<T> list, const std::vector<T>& more) {
  list.insert(list.end(), more.begin(), more.end());
  return list;
}

json example(const std::string& name) { return shardplan::read_json_file("examples/hf/" + name + ".json"); }

// The Qwen2 text keys every Qwen2-VL / Qwen2.5-VL config carries at its top level, walked here: the shape-field walk
// reaches Qwen2ForCausalLM alone. A new text width must reach the merger's output too (`out`).
std::vector<Walked> qwen_vl_text(const std::string& out) {
  return {{"/hidden_size", 1792, json::object(), {{out, 1792}}},
          {"/intermediate_size", 9472},
          {"/num_hidden_layers", 14},
          {"/num_attention_heads", 56},
          {"/num_key_value_heads", 2},
          {"/vocab_size", 151936},
          {"/tie_word_embeddings", true},
          {"/use_sliding_window", false},  // the walk's base slides from layer 14 on (its context below)
          {"/sliding_window", 2048},
          {"/max_window_layers", 20}};
}

const json kQwenVlSliding = {{"/use_sliding_window", true}, {"/max_window_layers", 14}};

std::vector<ConfigWalk> config_walks() {
  return {
      {"gpt-oss-20b",
       example("gpt-oss-20b"),
       {{"/sliding_window", 64},
        {"/layer_types", layer_list(24, "full_attention")},
        {"/num_experts_per_tok", 2, json::object(), {{"/experts_per_token", 2}}},
        {"/experts_per_token", 2}},
       plus<std::string>(kLlamaShape, {"/head_dim", "/attention_bias", "/num_local_experts"}),
       {{"/swiglu_limit", "the clamped SwiGLU is priced as SwiGLU (hf_arch_gpt_oss.cpp)"},
        {"/quantization_config", "Note [MXFP4 experts]: logical parameters, dequantised for training"},
        {"/initial_context_length", "OpenAI's pre-scaling context; rope_scaling bounds --seq-len"}}},
      {"gemma2-2b",
       example("gemma2-2b"),
       {{"/sliding_window", 1024},
        {"/layer_types", layer_list(26, "full_attention")},
        {"/final_logit_softcapping", 0.0}},
       plus<std::string>(kLlamaShape, {"/head_dim", "/attention_bias"}),
       {{"/attn_logit_softcapping", "a scalar tanh inside the attention kernel (hf_arch_gemma.cpp)"},
        {"/query_pre_attn_scalar", "the score scale: no tensor or work"}}},
      {"gemma3-1b",
       example("gemma3-1b"),
       {{"/sliding_window", 256},
        {"/sliding_window_pattern", 2},
        {"/layer_types", layer_list(26, "full_attention")},
        {"/final_logit_softcapping", 30.0}},
       plus<std::string>(kLlamaShape, {"/head_dim", "/attention_bias"}),
       {{"/attn_logit_softcapping", "a scalar tanh inside the attention kernel (hf_arch_gemma.cpp)"},
        {"/query_pre_attn_scalar", "the score scale"},
        {"/rope_local_base_freq", "the local layers' RoPE base: the same rotation kernels"}}},
      {"mistral-7b", example("mistral-7b"), {{"/sliding_window", nullptr}}, kLlamaShape, {}},
      {"mixtral-8x7b",
       example("mixtral-8x7b"),
       {{"/sliding_window", 4096}, {"/num_experts_per_tok", 1}},
       plus<std::string>(kLlamaShape, {"/num_local_experts"}),
       {}},
      {"qwen2-0.5b",
       with(example("qwen2-0.5b"), {{"/use_sliding_window", true}, {"/max_window_layers", 12}}),
       {{"/use_sliding_window", false},
        {"/sliding_window", 4096},
        {"/max_window_layers", 6},
        {"/layer_types", layer_list(24, "sliding_attention")}},
       kLlamaShape,
       {}},
      {"qwen3-8b",
       with(example("qwen3-8b"),
            {{"/use_sliding_window", true}, {"/sliding_window", 4096}, {"/max_window_layers", 30}}),
       {{"/use_sliding_window", false},
        {"/sliding_window", 1024},
        {"/max_window_layers", 20},
        {"/layer_types", layer_list(36, "full_attention")}},
       plus<std::string>(kLlamaShape, {"/head_dim", "/attention_bias"}),
       {}},
      {"qwen3-30b-a3b",
       with(example("qwen3-30b-a3b"), {{"/use_sliding_window", true}, {"/sliding_window", 4096}}),
       {{"/use_sliding_window", false}, {"/sliding_window", 1024}, {"/num_experts_per_tok", 4}},
       plus<std::string>(kLlamaShape, {"/head_dim", "/attention_bias", "/num_experts", "/moe_intermediate_size",
                          "/decoder_sparse_step", "/mlp_only_layers"}),
       {{"/max_window_layers", "not Qwen3MoeConfig's: Qwen3MoeAttention gives every layer the window"},
        {"/norm_topk_prob", "renormalises the top-k routing weights: no tensor or work"}}},
      {"phi3-mini-4k",
       example("phi3-mini-4k"),
       {{"/sliding_window", nullptr}},
       kLlamaShape,
       {{"/attention_bias", "Phi3Attention's qkv_proj and o_proj take bias=False whatever the key"},
        {"/embd_pdrop", "0.0 in the release; dropout masks are not counted for Phi-3"},
        {"/resid_pdrop", "0.0 in the release"},
        {"/original_max_position_embeddings", "LongRoPE's pre-scaling context: bounds --seq-len only"}}},
      {"qwen2.5-vl-7b-instruct",
       with(example("qwen2.5-vl-7b-instruct"), kQwenVlSliding),
       plus<Walked>(qwen_vl_text("/vision_config/out_hidden_size"),
            {{"/vision_config/depth", 16, json::object(),
              {{"/vision_config/fullatt_block_indexes", json::array({7, 15})}}},
             {"/vision_config/hidden_size", 640},
             {"/vision_config/intermediate_size", 1710},
             {"/vision_config/num_heads", 8},
             {"/vision_config/in_channels", 1},
             {"/vision_config/out_hidden_size", 1792},
             {"/vision_config/patch_size", 16, json::object(), {{"/vision_config/window_size", 128}}},
             {"/vision_config/spatial_merge_size", 1},
             {"/vision_config/temporal_patch_size", 1},
             {"/vision_config/window_size", 224},
             {"/vision_config/fullatt_block_indexes", json::array({0})}}),
       {},
       {{"/vision_config/in_chans", "not Qwen2_5_VLVisionConfig's key: the patch embedding reads in_channels (3)"},
        {"/vision_config/spatial_patch_size", "an older name of patch_size Qwen2_5_VLVisionConfig does not read"},
        {"/vision_config/tokens_per_second", "the video's temporal RoPE spacing: no tensor or work"}}},
      {"qwen2-vl-7b (preset)",
       with(*shardplan::find_model_preset("qwen2-vl-7b")->hf_document, kQwenVlSliding),
       plus<Walked>(qwen_vl_text("/vision_config/hidden_size"),
            {{"/vision_config/depth", 16},
             {"/vision_config/embed_dim", 640},
             {"/vision_config/mlp_ratio", 2},
             {"/vision_config/hidden_size", 1792},
             {"/vision_config/num_heads", 8},
             {"/vision_config/in_channels", 1},
             {"/vision_config/patch_size", 16},
             {"/vision_config/spatial_merge_size", 1},
             {"/vision_config/temporal_patch_size", 1}}),
       {},
       {}},
      {"llama4-scout-17b-16e",
       example("llama4-scout-17b-16e"),
       {{"/text_config/attention_chunk_size", 4096},
        {"/text_config/no_rope_layers", std::vector<int>(48, 1)},
        {"/text_config/use_qk_norm", false},             // Note [Llama 4 attention kernels]: the L2 norm's kernels
        {"/text_config/attn_temperature_tuning", false},  // the NoPE layers' query temperature kernels
        {"/text_config/layer_types", layer_list(48, "full_attention")},
        {"/text_config/num_experts_per_tok", 2},
        {"/text_config/intermediate_size", 4096},
        {"/text_config/intermediate_size_mlp", 8192, {{"/text_config/moe_layers", odd_layers(48)},
                                                      {"/text_config/interleave_moe_layer_step", 2}}},
        {"/text_config/interleave_moe_layer_step", 2, {{"/text_config/moe_layers", nullptr}}},
        {"/text_config/moe_layers", odd_layers(48)},
        {"/text_config/num_local_experts", 8},
        {"/text_config/hidden_size", 2560},
        {"/text_config/num_attention_heads", 80},
        {"/text_config/num_key_value_heads", 4},
        {"/text_config/head_dim", 64},
        {"/text_config/vocab_size", 100000},
        {"/text_config/num_hidden_layers", 24, {{"/text_config/moe_layers", nullptr}}},
        {"/text_config/attention_bias", true},
        {"/tie_word_embeddings", true},
        {"/vision_config/hidden_size", 704, json::object(), {{"/vision_config/intermediate_size", 2816}}},
        {"/vision_config/intermediate_size", 4096},
        {"/vision_config/num_attention_heads", 8},
        {"/vision_config/num_hidden_layers", 17},
        {"/vision_config/num_channels", 1},
        {"/vision_config/image_size", 448},
        {"/vision_config/patch_size", 28},
        {"/vision_config/pixel_shuffle_ratio", 0.25, json::object(), {{"/vision_config/intermediate_size", 22528}}},
        {"/vision_config/projector_input_dim", 2048},
        {"/vision_config/projector_output_dim", 2048, json::object(), {{"/vision_config/vision_output_dim", 2048}}},
        {"/vision_config/vision_output_dim", 2048},
        {"/vision_config/multi_modal_projector_bias", true}},
       {},
       {{"/text_config/attn_scale", "the NoPE layers' query temperature's value: the same kernels whatever it is"},
        {"/text_config/floor_scale", "that temperature's scale: the same kernels"},
        {"/text_config/for_llm_compressor", "a quantisation tool's flag"},
        {"/vision_config/projector_dropout", "0.0 in the release; dropout masks are not counted"},
        {"/vision_config/vision_feature_layer", "-1: get_image_features reads the encoder's last state, as modelled"},
        {"/vision_config/vision_feature_select_strategy", "'default', the layout modelled (hf_arch_llama4.cpp)"}}},
  };
}

shardplan::ModelSpec import(const json& config) {
  return shardplan::model_from_document(config, "walk", "config.json");
}

bool same_model(const shardplan::ModelSpec& a, const shardplan::ModelSpec& b) {
  return a.layers == b.layers && a.default_seq_len == b.default_seq_len;
}

}  // namespace

TEST_CASE("hf field walk: every key of the newest readers' configs is modelled, refused, or ignored with why") {
  for (const ConfigWalk& walk : config_walks()) {
    CAPTURE(walk.name);
    std::vector<std::string> keys;
    collect_keys(walk.config, "", keys);
    for (const std::string& key : keys) {
      CAPTURE(key);
      const auto named = [&](const auto& entry) { return entry.pointer == key; };
      const auto listed = [&](const auto& entry) { return entry.first == key; };
      const bool covered =
          std::any_of(walk.walked.begin(), walk.walked.end(), named) ||
          std::find(walk.shape_walked.begin(), walk.shape_walked.end(), key) != walk.shape_walked.end() ||
          std::any_of(walk.ignored.begin(), walk.ignored.end(), listed) ||
          std::any_of(no_effect_keys().begin(), no_effect_keys().end(),
                      [&](const auto& entry) { return entry.first == last_key(key); });
      CHECK_MESSAGE(covered, key << " is neither walked nor listed as ignored");
    }
    for (const Walked& field : walk.walked) {
      CAPTURE(field.pointer);
      const json base = with(walk.config, field.context);
      const shardplan::ModelSpec base_model = import(base);
      const json::json_pointer pointer(field.pointer);
      const bool differs = !base.contains(pointer) || base.at(pointer) != field.value;
      REQUIRE_MESSAGE(differs, "the walk sets its base value");
      const json changed = with(with(base, {{field.pointer, field.value}}), field.also);
      std::optional<shardplan::ModelSpec> model;
      std::string refusal;
      try {
        model = import(changed);
      } catch (const shardplan::InputError& error) {
        refusal = error.what();
      }
      if (model) {
        CHECK_MESSAGE(!same_model(*model, base_model),
                      field.pointer << " = " << field.value.dump() << " changed nothing: neither modelled nor refused");
      } else {
        CHECK_MESSAGE(refusal.find("'" + field_name(field.pointer) + "'") != std::string::npos,
                      "the refusal names the field: " << refusal);
        CHECK(refusal.find('\n') == std::string::npos);
      }
    }
  }
}
