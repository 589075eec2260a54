// Implementation of the Hugging Face `config.json` import: architecture detection and per-family field mapping.
#include "hf_config.h"

#include <optional>
#include <span>
#include <string_view>

#include "errors.h"
#include "hf_arch.h"
#include "input_limits.h"
#include "json_input.h"

namespace shardplan {
namespace {

enum class HfKind { llama, mistral, qwen2, gpt2, mixtral, qwen2_moe, qwen3, qwen3_moe, phi3, gemma2, gemma3_text,
                    deepseek_v2, deepseek_v3, gpt_neox };

struct KnownArchitecture {
  std::string_view class_name;  // the "architectures"[0] entry transformers writes
  std::string_view model_type;  // the "model_type" key, for configs saved without "architectures"
  HfKind kind;
};

// Only causal-LM heads: a ...ForSequenceClassification config has a different head, so it is not silently accepted.
std::span<const KnownArchitecture> known_architectures() {
  static constexpr KnownArchitecture table[] = {
      {"LlamaForCausalLM", "llama", HfKind::llama},
      {"MistralForCausalLM", "mistral", HfKind::mistral},
      {"Qwen2ForCausalLM", "qwen2", HfKind::qwen2},
      {"GPT2LMHeadModel", "gpt2", HfKind::gpt2},
      {"MixtralForCausalLM", "mixtral", HfKind::mixtral},
      {"Qwen2MoeForCausalLM", "qwen2_moe", HfKind::qwen2_moe},
      {"Qwen3ForCausalLM", "qwen3", HfKind::qwen3},
      {"Qwen3MoeForCausalLM", "qwen3_moe", HfKind::qwen3_moe},
      {"Phi3ForCausalLM", "phi3", HfKind::phi3},
      {"Gemma2ForCausalLM", "gemma2", HfKind::gemma2},
      {"Gemma3ForCausalLM", "gemma3_text", HfKind::gemma3_text},
      {"DeepseekV2ForCausalLM", "deepseek_v2", HfKind::deepseek_v2},
      {"DeepseekV3ForCausalLM", "deepseek_v3", HfKind::deepseek_v3},
      {"GPTNeoXForCausalLM", "gpt_neox", HfKind::gpt_neox},
  };
  return table;
}

// The configs model_source.cpp hands to the other importers before this one (hf_arch_vision.h, hf_arch_llava.h): an
// unsupported architecture's error lists them too.
constexpr KnownArchitecture kOtherImporters[] = {
    {"ViTModel", "vit", HfKind::llama},
    {"ViTForImageClassification", "", HfKind::llama},
    {"CLIPVisionModel", "clip_vision_model", HfKind::llama},
    {"SiglipVisionModel", "siglip_vision_model", HfKind::llama},
    {"LlavaForConditionalGeneration", "llava", HfKind::llama},
};

std::string supported_list(std::string_view KnownArchitecture::*member) {
  std::string list;
  const auto add = [&](const KnownArchitecture& known) {
    if ((known.*member).empty()) return;
    if (!list.empty()) list += ", ";
    list += std::string(known.*member);
  };
  for (const auto& known : known_architectures()) add(known);
  for (const auto& known : kOtherImporters) add(known);
  return list;
}

// "architectures" wins when present (it names the head as well as the body); a null or absent one falls back to
// "model_type", which older or hand-written configs carry alone.
HfKind detect_kind(const JsonObjectReader& config) {
  if (config.has("architectures") && !config.raw().at("architectures").is_null()) {
    const auto entries = config.array("architectures");
    if (!entries.front().is_string()) config.fail("architectures", "an array of architecture class names");
    const auto name = entries.front().get<std::string>();
    for (const auto& known : known_architectures()) {
      if (known.class_name == name) return known.kind;
    }
    throw InputError(config.origin() + ": field '" + config.field_path("architectures") +
                     "': unsupported architecture '" + name + "' (supported: " +
                     supported_list(&KnownArchitecture::class_name) + ")");
  }
  const auto model_type = config.string("model_type");
  for (const auto& known : known_architectures()) {
    if (known.model_type == model_type) return known.kind;
  }
  throw InputError(config.origin() + ": field '" + config.field_path("model_type") + "': unsupported model_type '" +
                   model_type + "' (supported: " + supported_list(&KnownArchitecture::model_type) + ")");
}

// Optional integer keys that transformers serialises as null when unset (num_key_value_heads, n_inner, head_dim), in
// 1..most (Note [Input limits]: read in range, so no product of them can overflow before build_decoder checks it).
std::optional<std::int64_t> optional_nullable_int(const JsonObjectReader& config, std::string_view key,
                                                  std::int64_t most) {
  if (!config.has(key) || config.raw().at(std::string(key)).is_null()) return std::nullopt;
  return config.int_in_range(key, 1, most);
}

// A required size, named by its Hugging Face key when out of range.
std::int64_t size_field(const JsonObjectReader& config, std::string_view key, std::int64_t most) {
  return config.int_in_range(key, 1, most);
}

// Keys that change the parameter count in ways DecoderArchitecture cannot express: refusing them beats silently
// planning for the wrong model size.
void reject_inexpressible(const JsonObjectReader& config) {
  if (config.boolean("mlp_bias", false)) config.fail("mlp_bias", "false (MLP biases are not supported)");
}

// Newer llama configs, Mistral-Nemo and Qwen3 carry head_dim, which may differ from hidden_size / num_heads: q_proj
// is then num_heads × head_dim wide (LlamaAttention: self.head_dim = getattr(config, "head_dim", hidden // heads)).
void read_head_dim(const JsonObjectReader& config, DecoderArchitecture& arch) {
  if (const auto head_dim = optional_nullable_int(config, "head_dim", limits::kMaxHiddenSize);
      head_dim && *head_dim * arch.num_heads != arch.hidden_size) {
    arch.explicit_head_dim = *head_dim;
  }
}

DecoderArchitecture llama_family(const JsonObjectReader& config, HfKind kind) {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::llama;
  arch.vocab_size = size_field(config, "vocab_size", limits::kMaxVocabSize);
  arch.hidden_size = size_field(config, "hidden_size", limits::kMaxHiddenSize);
  arch.intermediate_size = size_field(config, "intermediate_size", limits::kMaxIntermediateSize);
  arch.num_layers = size_field(config, "num_hidden_layers", limits::kMaxLayers);
  arch.num_heads = size_field(config, "num_attention_heads", limits::kMaxHeads);
  // transformers' LlamaConfig: num_key_value_heads None → num_attention_heads (plain multi-head attention).
  arch.num_kv_heads = optional_nullable_int(config, "num_key_value_heads", limits::kMaxHeads).value_or(arch.num_heads);
  // 2048 is LlamaConfig's default; it only bounds the sequence length, not the parameter count.
  arch.max_position_embeddings =
      config.optional_int_in_range("max_position_embeddings", 1, limits::kMaxPositions).value_or(2048);
  // Gemma2Config and Gemma3TextConfig tie by default (their configs omit the key); the llama family does not.
  const bool gemma = kind == HfKind::gemma2 || kind == HfKind::gemma3_text;
  arch.tie_word_embeddings = config.boolean("tie_word_embeddings", gemma);
  // Qwen2Attention hard-codes bias=True on q/k/v and its config has no key for it; LlamaConfig has attention_bias
  // (default false); MistralAttention has no biases at all.
  // Qwen3Config and Qwen3MoeConfig have attention_bias (default false) too.
  if (kind == HfKind::qwen2) {
    arch.attention_bias = true;
  } else if (kind == HfKind::llama || kind == HfKind::qwen3 || kind == HfKind::qwen3_moe || gemma) {
    arch.attention_bias = config.boolean("attention_bias", false);
  }
  arch.dropout = 0.0;  // attention_dropout is 0 in every released llama-family checkpoint and keeps no masks
  reject_inexpressible(config);
  read_head_dim(config, arch);
  // Each family's own keys (hf_arch.h).
  switch (kind) {
    case HfKind::mixtral: read_mixtral_moe(config, arch); break;
    case HfKind::qwen2_moe: read_qwen2_moe(config, arch); break;
    case HfKind::qwen3_moe: read_qwen3_moe(config, arch); [[fallthrough]];
    case HfKind::qwen3: arch.qk_norm = true; break;  // Qwen3Attention: q_norm, k_norm
    case HfKind::phi3: arch.fused_projections = true; break;  // Phi3Attention.qkv_proj, Phi3MLP.gate_up_proj
    case HfKind::gemma3_text: arch.qk_norm = true; [[fallthrough]];  // Gemma3Attention: q_norm, k_norm
    case HfKind::gemma2: read_gemma(config, arch); break;
    case HfKind::deepseek_v2: read_deepseek(config, arch, false); break;
    case HfKind::deepseek_v3: read_deepseek(config, arch, true); break;
    default: break;
  }
  return arch;
}

DecoderArchitecture gpt2(const JsonObjectReader& config) {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::gpt2;
  arch.vocab_size = size_field(config, "vocab_size", limits::kMaxVocabSize);
  arch.hidden_size = size_field(config, "n_embd", limits::kMaxHiddenSize);
  arch.num_layers = size_field(config, "n_layer", limits::kMaxLayers);
  arch.num_heads = size_field(config, "n_head", limits::kMaxHeads);
  arch.num_kv_heads = arch.num_heads;  // GPT-2 is plain multi-head attention
  // GPT2Config default 1024.
  arch.max_position_embeddings = config.optional_int_in_range("n_positions", 1, limits::kMaxPositions).value_or(1024);
  // GPT2MLP: inner_dim = n_inner if set else 4 * n_embd.
  arch.intermediate_size =
      optional_nullable_int(config, "n_inner", limits::kMaxIntermediateSize).value_or(4 * arch.hidden_size);
  // GPT2LMHeadModel ties lm_head to wte unless the config says otherwise (PretrainedConfig default true).
  arch.tie_word_embeddings = config.boolean("tie_word_embeddings", true);
  arch.attention_bias = false;  // GPT-2's biases are part of its block layout (family gpt2), not this flag
  const double dropout = config.non_negative_number("resid_pdrop", 0.1);
  if (dropout >= 1.0) config.fail("resid_pdrop", "a dropout probability in [0, 1)");
  arch.dropout = dropout;
  if (config.boolean("add_cross_attention", false)) {
    config.fail("add_cross_attention", "false (encoder-decoder cross-attention is not supported)");
  }
  return arch;
}

}  // namespace

bool looks_like_hf_config(const nlohmann::json& document) {
  return document.is_object() && (document.contains("architectures") || document.contains("model_type"));
}

DecoderArchitecture architecture_from_hf_config(const nlohmann::json& document, const std::string& origin) {
  const JsonObjectReader config(document, origin);
  const HfKind kind = detect_kind(config);
  if (kind == HfKind::gpt_neox) return gpt_neox_architecture(config);
  return kind == HfKind::gpt2 ? gpt2(config) : llama_family(config, kind);
}

}  // namespace shardplan
