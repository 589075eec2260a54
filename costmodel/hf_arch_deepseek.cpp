// Field mapping of the Hugging Face DeepSeek-V2 / V2-Lite / V3 configs onto MLA and MoeArchitecture.
#include "hf_arch.h"

#include <optional>
#include <string>

#include "input_limits.h"

namespace shardplan {
namespace {

// A key transformers serialises as null when unset (q_lora_rank, n_routed_experts, n_shared_experts): nullopt then.
std::optional<std::int64_t> nullable_int(const JsonObjectReader& config, std::string_view key, std::int64_t least,
                                         std::int64_t most) {
  if (!config.has(key) || config.raw().at(std::string(key)).is_null()) return std::nullopt;
  return config.int_in_range(key, least, most);
}

// DeepseekV2Config / DeepseekV3Config (transformers/models/deepseek_v2, deepseek_v3): the MLA keys (DeepSeek-V2
// paper §2.1; q_lora_rank null in DeepSeek-V2-Lite, whose queries are a plain q_proj).
MlaArchitecture read_mla(const JsonObjectReader& config) {
  MlaArchitecture mla;
  mla.q_lora_rank = nullable_int(config, "q_lora_rank", 1, limits::kMaxHiddenSize).value_or(0);
  mla.kv_lora_rank = config.int_in_range("kv_lora_rank", 1, limits::kMaxHiddenSize);
  mla.qk_nope_head_dim = config.int_in_range("qk_nope_head_dim", 1, 65536);
  mla.qk_rope_head_dim = config.int_in_range("qk_rope_head_dim", 1, 65536);
  mla.v_head_dim = config.int_in_range("v_head_dim", 1, 65536);
  return mla;
}

// Router keys that change no parameter count, read for their ranges so a malformed value is refused (DeepSeek-V3
// report §2.1.2: node-limited routing over n_group groups, topk_group of them; routed_scaling_factor scales the
// routed output; the scoring function and top-k method pick softmax / sigmoid and greedy / group-limited selection).
void check_deepseek_router_keys(const JsonObjectReader& config, std::int64_t experts) {
  const std::int64_t groups = config.optional_int_in_range("n_group", 1, experts).value_or(1);
  (void)config.optional_int_in_range("topk_group", 1, groups);
  (void)config.non_negative_number("routed_scaling_factor", 1.0);
  (void)config.non_negative_number("aux_loss_alpha", 0.0);
  (void)config.boolean("norm_topk_prob", false);
  (void)config.boolean("seq_aux", true);
  if (config.has("scoring_func")) {
    const std::string scoring = config.string("scoring_func");
    if (scoring != "softmax" && scoring != "sigmoid") config.fail("scoring_func", "'softmax' or 'sigmoid'");
  }
}

// Keys that change no parameter count but name what the counted work assumes, read so a malformed or different value
// is refused rather than ignored: the SwiGLU activation the MLP and expert kernels count (hidden_act "silu"), the
// top-k method (DeepseekV2MoE: greedy, group_limited_greedy; V3: noaux_tc), the RoPE base and the norms' epsilon.
void check_deepseek_keys(const JsonObjectReader& config) {
  if (config.has("hidden_act") && config.string("hidden_act") != "silu") {
    config.fail("hidden_act", "'silu' (DeepSeek's MLPs and experts are SwiGLU)");
  }
  if (config.has("topk_method")) {
    const std::string method = config.string("topk_method");
    if (method != "greedy" && method != "group_limited_greedy" && method != "noaux_tc") {
      config.fail("topk_method", "'greedy', 'group_limited_greedy' or 'noaux_tc'");
    }
  }
  if (config.has("rope_theta")) (void)config.number_in_range("rope_theta", 1e-6, 1e12);
  if (config.has("rms_norm_eps")) (void)config.number_in_range("rms_norm_eps", 0.0, 1.0);
  (void)config.optional_int_in_range("ep_size", 1, limits::kMaxLayers);
}

}  // namespace

// DeepseekV2ForCausalLM / DeepseekV3ForCausalLM. The decoder layer (DeepseekV2DecoderLayer) is the llama one with MLA
// for attention; its MLP is DeepseekV2MoE when n_routed_experts is set, layer_idx >= first_k_dense_replace and
// layer_idx % moe_layer_freq == 0, else a dense SwiGLU of intermediate_size. DeepseekV2MoE: gate (Linear(hidden,
// n_routed_experts), no bias; V3 adds e_score_correction_bias), n_routed_experts SwiGLU experts of
// moe_intermediate_size, and shared_experts, one SwiGLU of moe_intermediate_size × n_shared_experts. The attention
// has no biases unless attention_bias (false in every released checkpoint; refused here rather than half-counted).
// Not part of the Hugging Face model, so not counted: DeepSeek-V3's num_nextn_predict_layers multi-token-prediction
// module (model.layers.61 in the released safetensors, about 14B parameters, README_WEIGHTS.md), which
// DeepseekV3ForCausalLM does not build (its weights are skipped when loading).
void read_deepseek(const JsonObjectReader& config, DecoderArchitecture& arch, bool v3) {
  if (config.boolean("attention_bias", false)) {
    config.fail("attention_bias", "false (biases on DeepSeek's MLA projections are not supported)");
  }
  arch.attention_bias = false;
  check_deepseek_keys(config);
  arch.mla = read_mla(config);
  (void)config.optional_int_in_range("num_nextn_predict_layers", 0, limits::kMaxLayers);  // see above: not modelled
  const auto experts = nullable_int(config, "n_routed_experts", 1, 65536);
  if (!experts) return;  // every layer dense
  check_deepseek_router_keys(config, *experts);
  MoeArchitecture moe;
  moe.naming = MoeNaming::deepseek;
  moe.num_experts = *experts;
  moe.experts_per_token = config.int_in_range("num_experts_per_tok", 1, moe.num_experts);
  moe.expert_intermediate_size = config.int_in_range("moe_intermediate_size", 1, limits::kMaxIntermediateSize);
  const std::int64_t shared = nullable_int(config, "n_shared_experts", 0, 1024).value_or(0);
  moe.shared_intermediate_size = shared * moe.expert_intermediate_size;
  moe.first_dense_layers = config.optional_int_in_range("first_k_dense_replace", 0, limits::kMaxLayers).value_or(0);
  // layer_idx % moe_layer_freq == 0 is not MoeArchitecture's step rule (index % step == step - 1) beyond 1, and every
  // released DeepSeek-V2/V3 checkpoint has 1.
  if (config.optional_int_in_range("moe_layer_freq", 1, limits::kMaxLayers).value_or(1) != 1) {
    config.fail("moe_layer_freq", "1 (dense layers between MoE layers are not supported)");
  }
  // DeepseekV3TopkRouter (and DeepSeek's own modeling_deepseek.py MoEGate, as an nn.Parameter) carries the
  // aux-loss-free balancing bias; the released V3 safetensors hold mlp.gate.e_score_correction_bias per MoE layer.
  moe.router_correction_bias = v3;
  arch.moe = moe;
}

}  // namespace shardplan
