// Note [Shape fields] (costmodel/hf_config.cpp): for every supported architecture, the config fields that change a
// tensor's shape or count in transformers' modules, each set to another value on a small config of that
// architecture: the import must either model it (the model's tensors change) or refuse it (an InputError naming the
// field). A field that does neither is a silent miscount, and fails here.
//
// The tables are transformers' own, read from its source (huggingface/transformers, src/transformers/models/):
//   llama/configuration_llama.py, modeling_llama.py: vocab_size, hidden_size, intermediate_size, num_hidden_layers,
//     num_attention_heads, num_key_value_heads, head_dim (LlamaAttention: getattr(config, "head_dim", hidden //
//     heads)), attention_bias (q/k/v and o_proj), mlp_bias (gate/up/down), tie_word_embeddings.
//   mistral/configuration_mistral.py: the llama fields less the biases (MistralAttention, MistralMLP: bias=False).
//   qwen2/configuration_qwen2.py: the llama fields less the biases and head_dim's default (Qwen2Attention: q/k/v
//     bias=True, o_proj bias=False).
//   qwen2_moe/configuration_qwen2_moe.py: + num_experts, moe_intermediate_size, shared_expert_intermediate_size,
//     decoder_sparse_step, mlp_only_layers, qkv_bias (Qwen2MoeAttention's q/k/v biases).
//   qwen3/configuration_qwen3.py, qwen3_moe/configuration_qwen3_moe.py: + head_dim, attention_bias; the MoE keys
//     of Qwen2-MoE less the shared expert's and qkv_bias.
//   mixtral/configuration_mixtral.py: + head_dim, num_local_experts (each expert intermediate_size wide).
//   phi3/configuration_phi3.py: the llama fields less the biases and head_dim (Phi3Attention: qkv_proj).
//   gemma2/configuration_gemma2.py, gemma3/configuration_gemma3.py (Gemma3TextConfig): + head_dim, attention_bias.
//   deepseek_v2/configuration_deepseek_v2.py, deepseek_v3/configuration_deepseek_v3.py: q_lora_rank, kv_lora_rank,
//     qk_nope_head_dim, qk_rope_head_dim, v_head_dim, n_routed_experts, n_shared_experts, moe_intermediate_size,
//     first_k_dense_replace, attention_bias, V2's mlp_bias, intermediate_size (the dense layers).
//   gpt2/configuration_gpt2.py: vocab_size, n_embd, n_layer, n_positions (wpe), n_inner, add_cross_attention,
//     tie_word_embeddings.
//   gpt_neox/configuration_gpt_neox.py: vocab_size, hidden_size, intermediate_size, num_hidden_layers,
//     attention_bias, tie_word_embeddings.
//   olmo2/configuration_olmo2.py, modular_olmo2.py: the llama fields less mlp_bias (q_norm/k_norm follow the widths).
//   granite/configuration_granite.py: the llama fields (attention_bias, mlp_bias); granitemoe/
//     configuration_granitemoe.py: + num_local_experts, attention_bias, no mlp_bias.
//   phimoe/configuration_phimoe.py, modular_phimoe.py: the llama fields less mlp_bias, + num_local_experts,
//     attention_bias (PhimoeAttention is LlamaAttention), lm_head_bias.
//   starcoder2/configuration_starcoder2.py: the llama fields less head_dim and mlp_bias, + use_bias (q/k/v/o_proj,
//     c_fc, c_proj); tie_word_embeddings PretrainedConfig's (true).
//   falcon/configuration_falcon.py, modeling_falcon.py: vocab_size, hidden_size, num_hidden_layers,
//     num_attention_heads, num_kv_heads (query_key_value's width under new_decoder_architecture only),
//     new_decoder_architecture, multi_query, parallel_attn, num_ln_in_parallel_attn, bias, ffn_hidden_size, alibi,
//     tie_word_embeddings.
//   cohere/configuration_cohere.py, modeling_cohere.py: the llama fields less mlp_bias, + attention_bias, use_qk_norm,
//     tie_word_embeddings (true).
//   internlm2 (internlm/internlm2_5-7b: configuration_internlm2.py, remote code): the llama fields less head_dim and
//     mlp_bias, + bias (wqkv and wo; default true).
//   gpt_oss/configuration_gpt_oss.py: the llama fields less mlp_bias, + head_dim, attention_bias (default true),
//     num_local_experts (each expert intermediate_size wide).
// num_attention_heads changes k_proj's and v_proj's widths through head_dim where heads share hidden_size; fields
// that change no tensor (rope_theta, eps, dropout, sliding windows, token ids, router coefficients, num_experts_per_tok)
// are not listed here: test_hf_field_walk.cpp walks the work-changing ones (windows, chunks, experts per token) and
// every key of the shipped configs of the newest readers (Qwen2-VL, Qwen2.5-VL, Llama 4).
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "decoder_builder.h"
#include "errors.h"
#include "hf_config.h"

namespace {

using nlohmann::json;

struct ArchitectureFields {
  std::string architecture;                     // the "architectures" entry
  json base;                                    // a small valid config of it
  std::vector<std::pair<std::string, json>> set;  // each shape-changing field, set to another valid value
};

json llama_like(const std::string& architecture) {
  return json{{"architectures", json::array({architecture})},
              {"vocab_size", 1000},
              {"hidden_size", 64},
              {"intermediate_size", 176},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"max_position_embeddings", 512}};
}

json with(json base, const json& extra) {
  base.update(extra);
  return base;
}

// The fields every llama-like config has: the sizes, the heads, the tied head.
std::vector<std::pair<std::string, json>> common_fields(bool tied_by_default) {
  return {{"vocab_size", 1024},       {"hidden_size", 128},        {"intermediate_size", 192},
          {"num_hidden_layers", 3},   {"num_attention_heads", 8},  {"num_key_value_heads", 4},
          {"tie_word_embeddings", !tied_by_default}};
}

std::vector<std::pair<std::string, json>> plus(std::vector<std::pair<std::string, json>> fields,
                                               const std::vector<std::pair<std::string, json>>& more) {
  fields.insert(fields.end(), more.begin(), more.end());
  return fields;
}

std::vector<ArchitectureFields> transformers_shape_fields() {
  // decoder_sparse_step 2: layer 0 is a dense MLP of intermediate_size, layer 1 MoE, so both widths show.
  const json qwen_moe = {
      {"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32}, {"decoder_sparse_step", 2}};
  const json deepseek = {{"q_lora_rank", 32},       {"kv_lora_rank", 16},         {"qk_nope_head_dim", 8},
                         {"qk_rope_head_dim", 8},   {"v_head_dim", 16},           {"n_routed_experts", 4},
                         {"n_shared_experts", 1},   {"num_experts_per_tok", 2},   {"moe_intermediate_size", 32},
                         {"first_k_dense_replace", 1}};
  const std::vector<std::pair<std::string, json>> deepseek_fields = {
      {"vocab_size", 1024},      {"hidden_size", 128},      {"intermediate_size", 192}, {"num_hidden_layers", 3},
      {"num_attention_heads", 8}, {"tie_word_embeddings", true}, {"q_lora_rank", 48},     {"kv_lora_rank", 24},
      {"qk_nope_head_dim", 16},  {"qk_rope_head_dim", 16},  {"v_head_dim", 8},           {"n_routed_experts", 8},
      {"n_shared_experts", 2},   {"moe_intermediate_size", 48}, {"first_k_dense_replace", 0},
      {"attention_bias", true}};
  // Falcon-7B's shape (multi-query, parallel attention, one norm) in small.
  const json falcon = {{"architectures", json::array({"FalconForCausalLM"})},
                       {"vocab_size", 1000},
                       {"hidden_size", 64},
                       {"num_hidden_layers", 2},
                       {"num_attention_heads", 4},
                       {"multi_query", true},
                       {"parallel_attn", true}};
  const std::vector<std::pair<std::string, json>> falcon_fields = {
      {"vocab_size", 1024},       {"hidden_size", 128},      {"num_hidden_layers", 3},
      {"num_attention_heads", 8}, {"multi_query", false},    {"new_decoder_architecture", true},
      {"parallel_attn", false},   {"bias", true},            {"ffn_hidden_size", 100},
      {"alibi", true},            {"num_ln_in_parallel_attn", 2}, {"tie_word_embeddings", false}};
  return {
      {"LlamaForCausalLM", llama_like("LlamaForCausalLM"),
       plus(common_fields(false), {{"head_dim", 32}, {"attention_bias", true}, {"mlp_bias", true}})},
      {"MistralForCausalLM", llama_like("MistralForCausalLM"), plus(common_fields(false), {{"head_dim", 32}})},
      {"Qwen2ForCausalLM", llama_like("Qwen2ForCausalLM"), plus(common_fields(false), {{"head_dim", 32}})},
      {"Qwen2MoeForCausalLM",
       with(llama_like("Qwen2MoeForCausalLM"), with(qwen_moe, {{"shared_expert_intermediate_size", 64}})),
       plus(common_fields(false), {{"head_dim", 32},
                                   {"num_experts", 8},
                                   {"moe_intermediate_size", 48},
                                   {"shared_expert_intermediate_size", 96},
                                   {"decoder_sparse_step", 1},
                                   {"mlp_only_layers", json::array({0})},
                                   {"qkv_bias", false}})},
      {"Qwen3ForCausalLM", llama_like("Qwen3ForCausalLM"),
       plus(common_fields(false), {{"head_dim", 32}, {"attention_bias", true}})},
      {"Qwen3MoeForCausalLM", with(llama_like("Qwen3MoeForCausalLM"), qwen_moe),
       plus(common_fields(false), {{"head_dim", 32},
                                   {"attention_bias", true},
                                   {"num_experts", 8},
                                   {"moe_intermediate_size", 48},
                                   {"decoder_sparse_step", 1},
                                   {"mlp_only_layers", json::array({0})}})},
      {"MixtralForCausalLM", with(llama_like("MixtralForCausalLM"), {{"num_local_experts", 4}}),
       plus(common_fields(false), {{"head_dim", 32}, {"num_local_experts", 8}})},
      {"Phi3ForCausalLM", llama_like("Phi3ForCausalLM"), common_fields(false)},
      {"Gemma2ForCausalLM", with(llama_like("Gemma2ForCausalLM"), {{"head_dim", 16}}),
       plus(common_fields(true), {{"head_dim", 32}, {"attention_bias", true}})},
      {"Gemma3ForCausalLM", with(llama_like("Gemma3ForCausalLM"), {{"head_dim", 16}}),
       plus(common_fields(true), {{"head_dim", 32}, {"attention_bias", true}})},
      {"DeepseekV2ForCausalLM", with(llama_like("DeepseekV2ForCausalLM"), deepseek),
       plus(deepseek_fields, {{"mlp_bias", true}})},
      {"DeepseekV3ForCausalLM", with(llama_like("DeepseekV3ForCausalLM"), deepseek), deepseek_fields},
      {"GPT2LMHeadModel",
       json{{"architectures", json::array({"GPT2LMHeadModel"})}, {"vocab_size", 1000}, {"n_embd", 64},
            {"n_layer", 2}, {"n_head", 4}, {"n_positions", 256}},
       {{"vocab_size", 1024},
        {"n_embd", 128},
        {"n_layer", 3},
        {"n_positions", 512},
        {"n_inner", 100},
        {"add_cross_attention", true},
        {"tie_word_embeddings", false}}},
      {"GPTNeoXForCausalLM",
       json{{"architectures", json::array({"GPTNeoXForCausalLM"})}, {"vocab_size", 1000}, {"hidden_size", 64},
            {"intermediate_size", 256}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}},
       {{"vocab_size", 1024},
        {"hidden_size", 128},
        {"intermediate_size", 192},
        {"num_hidden_layers", 3},
        {"attention_bias", false},
        {"tie_word_embeddings", true}}},
      {"Olmo2ForCausalLM", llama_like("Olmo2ForCausalLM"),
       plus(common_fields(false), {{"head_dim", 32}, {"attention_bias", true}})},
      {"GraniteForCausalLM", llama_like("GraniteForCausalLM"),
       plus(common_fields(false), {{"head_dim", 32}, {"attention_bias", true}, {"mlp_bias", true}})},
      {"GraniteMoeForCausalLM", with(llama_like("GraniteMoeForCausalLM"), {{"num_local_experts", 4}}),
       plus(common_fields(false), {{"head_dim", 32}, {"attention_bias", true}, {"num_local_experts", 8}})},
      {"Starcoder2ForCausalLM", llama_like("Starcoder2ForCausalLM"), plus(common_fields(true), {{"use_bias", false}})},
      {"FalconForCausalLM", falcon, falcon_fields},
      {"FalconForCausalLM (new_decoder_architecture)",
       with(falcon, {{"new_decoder_architecture", true}, {"num_kv_heads", 2}}),
       {{"num_kv_heads", 4}, {"num_ln_in_parallel_attn", 1}}},
      {"CohereForCausalLM", llama_like("CohereForCausalLM"),
       plus(common_fields(true), {{"head_dim", 32}, {"attention_bias", true}, {"use_qk_norm", true}})},
      {"InternLM2ForCausalLM", llama_like("InternLM2ForCausalLM"), plus(common_fields(false), {{"bias", false}})},
      {"GptOssForCausalLM",
       with(llama_like("GptOssForCausalLM"),
            {{"num_local_experts", 4}, {"num_experts_per_tok", 2}, {"head_dim", 16}, {"sliding_window", 32}}),
       plus(common_fields(false), {{"head_dim", 32}, {"attention_bias", false}, {"num_local_experts", 8}})},
      {"PhimoeForCausalLM", with(llama_like("PhimoeForCausalLM"), {{"num_local_experts", 4}}),
       plus(common_fields(false),
            {{"head_dim", 32}, {"attention_bias", true}, {"lm_head_bias", true}, {"num_local_experts", 8}})},
  };
}

// Every tensor of the model, by layer and name, with its shape: what "changes a tensor's shape or count" compares.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors_of(const json& config) {
  const shardplan::ModelSpec model =
      shardplan::build_decoder("t", shardplan::architecture_from_hf_config(config, "config.json"), "config.json");
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors;
  for (const auto& layer : model.layers) {
    for (const auto& tensor : layer.tensors) tensors.emplace_back(layer.name + "." + tensor.name, tensor.shape);
    if (layer.tied_to_layer) tensors.emplace_back(layer.name + " tied", std::vector<std::int64_t>{});
  }
  return tensors;
}

}  // namespace

TEST_CASE("hf shape fields: every field transformers reads into a tensor shape is modelled or refused") {
  for (const ArchitectureFields& entry : transformers_shape_fields()) {
    CAPTURE(entry.architecture);
    const auto base = tensors_of(entry.base);  // the base config itself imports
    for (const auto& field : entry.set) {
      const std::string& key = field.first;
      const json& value = field.second;
      CAPTURE(key);
      json changed = entry.base;
      REQUIRE_MESSAGE(changed.value(key, json()) != value, "the test sets " << key << " to its base value");
      changed[key] = value;
      bool refused = false;
      std::string message;
      std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors;
      try {
        tensors = tensors_of(changed);
      } catch (const shardplan::InputError& error) {
        refused = true;
        message = error.what();
      }
      if (refused) {
        CHECK_MESSAGE(message.find("'" + key + "'") != std::string::npos, "the refusal names the field: " << message);
        CHECK(message.find('\n') == std::string::npos);
      } else {
        CHECK_MESSAGE(tensors != base, key << " = " << value.dump() << " changed no tensor: neither modelled nor refused");
      }
    }
  }
}

TEST_CASE("hf shape fields: the refusals name the field and what shardplan assumes, in one line") {
  auto deepseek = json{{"architectures", json::array({"DeepseekV2ForCausalLM"})}, {"vocab_size", 1000},
                       {"hidden_size", 64}, {"intermediate_size", 176}, {"num_hidden_layers", 2},
                       {"num_attention_heads", 4}, {"kv_lora_rank", 16}, {"qk_nope_head_dim", 8},
                       {"qk_rope_head_dim", 8}, {"v_head_dim", 16}, {"mlp_bias", true}};
  try {
    (void)shardplan::architecture_from_hf_config(deepseek, "ds.json");
    FAIL("mlp_bias on DeepSeek was accepted");
  } catch (const shardplan::InputError& error) {
    CHECK(std::string(error.what()) ==
          "ds.json: field 'mlp_bias': expected false (biases on DeepSeek's MLPs and experts are not modelled), got "
          "true");
  }
  deepseek["mlp_bias"] = false;
  CHECK_NOTHROW((void)shardplan::architecture_from_hf_config(deepseek, "ds.json"));

  // Hybrids and the architectures shardplan knows it does not model are refused by name, with why.
  for (const char* name : {"JambaForCausalLM", "MambaForCausalLM", "Mamba2ForCausalLM", "FalconMambaForCausalLM"}) {
    CAPTURE(name);
    json config = {{"architectures", json::array({name})}};
    try {
      (void)shardplan::architecture_from_hf_config(config, "c.json");
      FAIL("accepted");
    } catch (const shardplan::InputError& error) {
      const std::string message = error.what();
      CHECK(message.find(std::string("architecture '") + name + "' is not supported: ") != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
    }
  }
}
