// The per-family hooks of the Hugging Face config import: each reads its family's keys onto the llama-family base.
#pragma once

#include <cstdint>
#include <functional>

#include "json_input.h"
#include "model_spec.h"

namespace shardplan {

// hf_arch_sliding.cpp. Note [Sliding-window attention]: config.sliding_window (`family_default` when the key is
// absent, as the family's config class defaults it; 0 when null) ...
std::int64_t read_nullable_window(const JsonObjectReader& config, std::int64_t family_default);
// ... and which layers slide: layer_types when the config lists them, else `family_pattern(layer index)` as the
// family's config class derives the list. A null window (0) leaves every layer full.
void read_sliding_layers(const JsonObjectReader& config, DecoderArchitecture& arch, std::int64_t window,
                         const std::function<bool(std::int64_t)>& family_pattern);
// MistralForCausalLM (family_default 4096), MixtralForCausalLM and Phi3ForCausalLM (0): one window on every layer.
void read_every_layer_window(const JsonObjectReader& config, DecoderArchitecture& arch, std::int64_t family_default);
// Qwen2ForCausalLM and Qwen3ForCausalLM: use_sliding_window, sliding_window, max_window_layers, layer_types.
void read_qwen2_window(const JsonObjectReader& config, DecoderArchitecture& arch);
// Qwen3MoeForCausalLM: use_sliding_window, sliding_window, on every layer.
void read_qwen3_moe_window(const JsonObjectReader& config, DecoderArchitecture& arch);

// hf_arch_moe.cpp. MixtralForCausalLM: num_local_experts, num_experts_per_tok, intermediate_size (each expert's).
void read_mixtral_moe(const JsonObjectReader& config, DecoderArchitecture& arch);
// Qwen2MoeForCausalLM: num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size,
// decoder_sparse_step, mlp_only_layers (refused unless empty).
void read_qwen2_moe(const JsonObjectReader& config, DecoderArchitecture& arch);
// Qwen3MoeForCausalLM: as Qwen2-MoE without the shared expert; its attention is Qwen3's (read_qwen3_attention).
void read_qwen3_moe(const JsonObjectReader& config, DecoderArchitecture& arch);

// PhimoeForCausalLM (Phi-3.5-MoE): Mixtral's experts, LayerNorms with biases, attention_bias on q/k/v/o, lm_head_bias.
void read_phimoe(const JsonObjectReader& config, DecoderArchitecture& arch);
// GraniteMoeForCausalLM: num_local_experts, num_experts_per_tok, each expert of intermediate_size, stacked.
void read_granitemoe(const JsonObjectReader& config, DecoderArchitecture& arch);

// hf_arch_olmo_granite.cpp. Olmo2ForCausalLM: post-norms only, q/k norms over every head at once.
void read_olmo2(const JsonObjectReader& config, DecoderArchitecture& arch);
// GraniteForCausalLM, GraniteMoeForCausalLM: the scalar multipliers (embedding, residual, attention, logits), which
// change no tensor, read for their ranges.
void read_granite_scalars(const JsonObjectReader& config);

// hf_arch_gemma.cpp. Gemma2ForCausalLM, Gemma3ForCausalLM (text): sandwich norms, final_logit_softcapping, local
// (sliding-window) layers alternating with global ones (Gemma 2) or five of six (Gemma 3: sliding_window_pattern).
void read_gemma(const JsonObjectReader& config, DecoderArchitecture& arch, bool gemma3);

// hf_arch_deepseek.cpp. DeepseekV2ForCausalLM, DeepseekV3ForCausalLM: Multi-head Latent Attention (q_lora_rank,
// kv_lora_rank, qk_nope/qk_rope/v head dims) and the DeepSeekMoE MLP (n_routed_experts, n_shared_experts,
// moe_intermediate_size, first_k_dense_replace dense layers; V3's router correction bias).
void read_deepseek(const JsonObjectReader& config, DecoderArchitecture& arch, bool v3);

// hf_arch_starcoder2.cpp. Starcoder2ForCausalLM: LayerNorms with biases, use_bias on q/k/v/o and c_fc/c_proj, a
// two-matrix GELU MLP, a sliding window on every layer, the residual/attention/embedding dropouts.
void read_starcoder2(const JsonObjectReader& config, DecoderArchitecture& arch);

// hf_arch_cohere_internlm2.cpp. CohereForCausalLM: bias-free LayerNorms, a parallel block, use_qk_norm (a weight per
// head), logit_scale. InternLM2ForCausalLM: fused wqkv, `bias` on wqkv and wo, InternLM2's module names.
void read_cohere(const JsonObjectReader& config, DecoderArchitecture& arch);
void read_internlm2(const JsonObjectReader& config, DecoderArchitecture& arch);

// hf_arch_gpt_oss.cpp. GptOssForCausalLM: stacked experts with biases and a biased router, attention sinks,
// alternating sliding-window layers (layer_types), q/k/v/o biases; MXFP4 experts counted as logical parameters.
void read_gpt_oss(const JsonObjectReader& config, DecoderArchitecture& arch);

// hf_arch_falcon.cpp. FalconForCausalLM (its own keys on the llama block): fused query_key_value for multi-head,
// multi-query or grouped (new_decoder_architecture) attention, parallel attention with one or two LayerNorms, `bias`,
// a GELU MLP of ffn_hidden_size; ALiBi refused.
DecoderArchitecture falcon_architecture(const JsonObjectReader& config);

// hf_arch_neox.cpp. GPTNeoXForCausalLM (its own family, not the llama base): fused query_key_value, parallel
// residual, partial rotary (rotary_pct), LayerNorms and dense layers with biases, untied embed_out.
DecoderArchitecture gpt_neox_architecture(const JsonObjectReader& config);

}  // namespace shardplan
