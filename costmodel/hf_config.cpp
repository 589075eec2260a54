// Implementation of the Hugging Face `config.json` import: architecture detection and per-family field mapping.
#include "hf_config.h"

#include <algorithm>
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
                    deepseek_v2, deepseek_v3, gpt_neox, olmo2, granite, granitemoe, phimoe, starcoder2, falcon,
                    cohere, internlm2, gpt_oss };

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
      {"Olmo2ForCausalLM", "olmo2", HfKind::olmo2},
      {"GraniteForCausalLM", "granite", HfKind::granite},
      {"GraniteMoeForCausalLM", "granitemoe", HfKind::granitemoe},
      {"PhimoeForCausalLM", "phimoe", HfKind::phimoe},
      // microsoft/Phi-3.5-MoE-instruct's config.json names its remote-code class, the same model.
      {"PhiMoEForCausalLM", "", HfKind::phimoe},
      {"Starcoder2ForCausalLM", "starcoder2", HfKind::starcoder2},
      {"FalconForCausalLM", "falcon", HfKind::falcon},
      {"CohereForCausalLM", "cohere", HfKind::cohere},
      // internlm/internlm2*: remote code (modeling_internlm2.py), the class its config.json names.
      {"InternLM2ForCausalLM", "internlm2", HfKind::internlm2},
      {"GptOssForCausalLM", "gpt_oss", HfKind::gpt_oss},
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
    {"Gemma3ForConditionalGeneration", "gemma3", HfKind::llama},
    {"Qwen2VLForConditionalGeneration", "qwen2_vl", HfKind::llama},
    {"Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", HfKind::llama},
    {"Llama4ForConditionalGeneration", "llama4", HfKind::llama},
    {"Llama4ForCausalLM", "llama4_text", HfKind::llama},
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

// Architectures a user may name that shardplan knows it does not model, with why: refused by name rather than with
// the generic list. Hybrids carry state-space (Mamba) mixers whose parameters and work no block here counts.
struct RefusedArchitecture {
  std::string_view class_name;
  std::string_view why;
};
constexpr RefusedArchitecture kRefusedArchitectures[] = {
    {"JambaForCausalLM", "a hybrid of attention and Mamba state-space layers (and MoE), which are not modelled"},
    {"MambaForCausalLM", "Mamba state-space layers, which are not modelled"},
    {"Mamba2ForCausalLM", "Mamba-2 state-space layers, which are not modelled"},
    {"FalconMambaForCausalLM", "Mamba state-space layers, which are not modelled"},
    {"ZambaForCausalLM", "a hybrid of Mamba state-space layers and shared attention, which is not modelled"},
    {"Zamba2ForCausalLM", "a hybrid of Mamba-2 state-space layers and shared attention, which is not modelled"},
    {"RecurrentGemmaForCausalLM", "recurrent (RG-LRU) layers, which are not modelled"},
};

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
    for (const auto& refused : kRefusedArchitectures) {
      if (refused.class_name == name) {
        throw InputError(config.origin() + ": field '" + config.field_path("architectures") + "': architecture '" +
                         name + "' is not supported: " + std::string(refused.why));
      }
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

// Note [Shape fields]: every config field that changes a tensor's shape or count in transformers' modules is either
// modelled (read into DecoderArchitecture, so the count follows it) or refused here when it is set to anything but
// the value the count assumes — never ignored. The test (tests/unit/test_hf_shape_fields.cpp) walks transformers'
// shape-changing fields per architecture, read from its configuration_*.py and modeling_*.py, and fails on one
// neither modelled nor refused. These are the refused ones that no family reader refuses itself (those: Qwen-MoE's
// mlp_only_layers, GPT-2's add_cross_attention, DeepSeek's attention_bias and moe_layer_freq).
struct UnmodelledShapeField {
  std::string_view key;
  bool (*applies)(HfKind);
  const char* expected;  // the value the count assumes, as the message words it
  bool (*is_default)(const nlohmann::json&);
};

bool is_false_or_null(const nlohmann::json& value) { return value.is_null() || (value.is_boolean() && !value.get<bool>()); }
bool is_deepseek(HfKind kind) { return kind == HfKind::deepseek_v2 || kind == HfKind::deepseek_v3; }

constexpr UnmodelledShapeField kUnmodelledShapeFields[] = {
    // DeepseekV2Config carries LlamaConfig's mlp_bias (transformers/models/deepseek_v2/configuration_deepseek_v2.py);
    // every released DeepSeek checkpoint has unbiased MLPs and experts.
    {"mlp_bias", is_deepseek, "false (biases on DeepSeek's MLPs and experts are not modelled)", is_false_or_null},
};

void reject_unmodelled_shape_fields(const JsonObjectReader& config, HfKind kind) {
  for (const auto& field : kUnmodelledShapeFields) {
    if (!field.applies(kind) || !config.has(field.key)) continue;
    if (!field.is_default(config.raw().at(std::string(field.key)))) config.fail(field.key, field.expected);
  }
}

// Newer llama configs, Mistral-Nemo and Qwen3 carry head_dim, which may differ from hidden_size / num_heads: q_proj
// is then num_heads × head_dim wide (LlamaAttention: self.head_dim = getattr(config, "head_dim", hidden // heads)).
void read_head_dim(const JsonObjectReader& config, DecoderArchitecture& arch) {
  if (const auto head_dim = optional_nullable_int(config, "head_dim", limits::kMaxHiddenSize);
      head_dim && *head_dim * arch.num_heads != arch.hidden_size) {
    arch.explicit_head_dim = *head_dim;
  }
}

// Note [Long context] (model_spec.h): a config's RoPE scaling (transformers' rope_scaling, rope_parameters since v5:
// {"rope_type" or "type": linear, dynamic, yarn, longrope, llama3, ..., "factor": F,
// "original_max_position_embeddings": O}) stretches the positions the model was trained on by F: it names
// F × O (O defaulting to max_position_embeddings) as the reach. Llama 3.1's llama3 scaling names 8 × 8192, which its
// max_position_embeddings already says; Qwen2.5's YaRN (factor 4 over 32,768) reaches 131,072 past it. A scaling
// without a factor (longrope's lists), or "default", names nothing beyond max_position_embeddings. Linear scaling
// (positional interpolation, Chen et al. 2023) names no original length: transformers' linear rope parameters only
// divide the frequencies by F (modeling_rope_utils.py, _compute_linear_scaling_rope_parameters), and the configs
// that use it publish the interpolated length as max_position_embeddings — Gemma 3 4B/12B/27B's text_config names
// 131,072 with {"rope_type": "linear", "factor": 8.0} for its global layers (google/gemma-3-4b-it config.json,
// examples/hf/gemma3-4b-it.json; the model card's 128K context), not 8 × 131,072. So linear scaling reaches F × O
// only where the config names O (original_max_position_embeddings), else max_position_embeddings.
void read_rope_scaling(const JsonObjectReader& config, DecoderArchitecture& arch) {
  for (const std::string_view key : {"rope_scaling", "rope_parameters"}) {
    if (!config.has(key) || config.raw().at(std::string(key)).is_null()) continue;
    const JsonObjectReader scaling = config.object(key);
    const auto type = scaling.has("rope_type") ? scaling.optional_string("rope_type") : scaling.optional_string("type");
    if (type && *type == "default") continue;
    const auto factor = scaling.optional_number_in_range("factor", 1.0, 1e6);
    if (!factor) continue;
    if (type && *type == "linear" && !scaling.has("original_max_position_embeddings")) continue;
    const std::int64_t original =
        scaling.optional_int_in_range("original_max_position_embeddings", 1, limits::kMaxPositions)
            .value_or(arch.max_position_embeddings);
    const double reach = *factor * static_cast<double>(original);
    arch.rope_scaled_positions =
        std::max(arch.rope_scaled_positions,
                 static_cast<std::int64_t>(std::min(reach, static_cast<double>(limits::kMaxPositions))));
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
  // 2048 is LlamaConfig's default, 8192 Gemma2Config's and 131072 Gemma3TextConfig's (configuration_gemma2.py,
  // configuration_gemma3.py); it only bounds the sequence length, not the parameter count.
  const std::int64_t default_positions =
      kind == HfKind::gemma3_text ? 131'072 : kind == HfKind::gemma2 ? 8192 : 2048;
  arch.max_position_embeddings =
      config.optional_int_in_range("max_position_embeddings", 1, limits::kMaxPositions).value_or(default_positions);
  // Gemma2Config and Gemma3TextConfig tie by default (their configs omit the key); the llama family does not.
  const bool gemma = kind == HfKind::gemma2 || kind == HfKind::gemma3_text;
  // So do CohereConfig (tie_word_embeddings=True) and Starcoder2Config (no key of its own: PretrainedConfig's True).
  arch.tie_word_embeddings =
      config.boolean("tie_word_embeddings", gemma || kind == HfKind::cohere || kind == HfKind::starcoder2);
  // Qwen2Attention hard-codes bias=True on q/k/v and bias=False on o_proj, and its config has no key for them;
  // LlamaConfig has attention_bias (default false), which LlamaAttention applies to q, k, v *and* o_proj
  // (transformers/models/llama/modeling_llama.py: o_proj = nn.Linear(..., bias=config.attention_bias)); so do
  // Qwen3Attention, Qwen3MoeAttention and Gemma2/3Attention. MistralAttention has no biases at all.
  if (kind == HfKind::qwen2) {
    arch.attention_bias = true;
  } else if (kind == HfKind::llama || kind == HfKind::qwen3 || kind == HfKind::qwen3_moe || gemma ||
             kind == HfKind::olmo2 || kind == HfKind::granite || kind == HfKind::granitemoe ||
             kind == HfKind::phimoe || kind == HfKind::cohere || kind == HfKind::gpt_oss) {
    // Olmo2Attention (OlmoAttention, LlamaAttention's), GraniteAttention, GraniteMoeAttention and PhimoeAttention
    // (LlamaAttention) likewise; CohereAttention and GptOssAttention too (GptOssConfig's default is true).
    arch.attention_bias = config.boolean("attention_bias", kind == HfKind::gpt_oss);
    arch.o_proj_bias = arch.attention_bias;
  }
  // LlamaMLP and GraniteMLP: gate_proj, up_proj and down_proj take bias=config.mlp_bias (LlamaConfig and
  // GraniteConfig default false; Granite Code sets it). The other families' MLPs have no such key and no biases.
  if (kind == HfKind::llama || kind == HfKind::granite) arch.mlp_bias = config.boolean("mlp_bias", false);
  arch.dropout = 0.0;  // attention_dropout is 0 in every released llama-family checkpoint and keeps no masks
  read_head_dim(config, arch);
  read_rope_scaling(config, arch);
  reject_unmodelled_shape_fields(config, kind);
  // Each family's own keys (hf_arch.h).
  switch (kind) {
    case HfKind::mistral: read_every_layer_window(config, arch, 4096); break;
    case HfKind::mixtral:
      read_mixtral_moe(config, arch);
      read_every_layer_window(config, arch, 0);
      break;
    case HfKind::qwen2: read_qwen2_window(config, arch); break;
    case HfKind::qwen2_moe: read_qwen2_moe(config, arch); break;
    case HfKind::qwen3_moe:
      read_qwen3_moe(config, arch);
      read_qwen3_moe_window(config, arch);
      arch.qk_norm = true;  // Qwen3MoeAttention: q_norm, k_norm
      break;
    case HfKind::qwen3:
      arch.qk_norm = true;  // Qwen3Attention: q_norm, k_norm
      read_qwen2_window(config, arch);
      break;
    case HfKind::phi3:
      arch.fused_projections = true;  // Phi3Attention.qkv_proj, Phi3MLP.gate_up_proj
      read_every_layer_window(config, arch, 0);
      break;
    case HfKind::gemma3_text:
      arch.qk_norm = true;  // Gemma3Attention: q_norm, k_norm
      read_gemma(config, arch, true);
      break;
    case HfKind::gemma2: read_gemma(config, arch, false); break;
    case HfKind::deepseek_v2: read_deepseek(config, arch, false); break;
    case HfKind::deepseek_v3: read_deepseek(config, arch, true); break;
    case HfKind::olmo2: read_olmo2(config, arch); break;
    case HfKind::phimoe: read_phimoe(config, arch); break;
    case HfKind::granitemoe: read_granitemoe(config, arch); [[fallthrough]];
    case HfKind::granite: read_granite_scalars(config); break;
    case HfKind::starcoder2: read_starcoder2(config, arch); break;
    case HfKind::cohere: read_cohere(config, arch); break;
    case HfKind::internlm2: read_internlm2(config, arch); break;
    case HfKind::gpt_oss: read_gpt_oss(config, arch); break;
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
  if (kind == HfKind::falcon) {
    DecoderArchitecture arch = falcon_architecture(config);
    read_rope_scaling(config, arch);  // FalconConfig's rope_scaling (Note [Long context])
    return arch;
  }
  return kind == HfKind::gpt2 ? gpt2(config) : llama_family(config, kind);
}

}  // namespace shardplan
