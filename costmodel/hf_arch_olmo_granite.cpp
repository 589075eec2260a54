// Field mapping of the Hugging Face OLMo 2 and Granite (dense and MoE) configs onto the llama-family architecture.
#include "hf_arch.h"

#include <string>
#include <string_view>

namespace shardplan {

// Olmo2Config (transformers/models/olmo2/configuration_olmo2.py, modular_olmo2.py): the llama keys, attention_bias
// (q, k, v and o_proj, OlmoAttention being LlamaAttention's) read by the caller. Olmo2DecoderLayer deletes
// input_layernorm and normalises each branch's output instead (post_attention_layernorm after attention,
// post_feedforward_layernorm after the MLP, before each residual add); Olmo2Attention adds q_norm =
// RMSNorm(heads·head_dim) and k_norm = RMSNorm(kv_heads·head_dim) over the projections' whole outputs (Qwen3's are
// per head). Two norms a block as in llama, so the kernels and what backward keeps are llama's; the q/k norms are
// Qwen3's work over the same widths.
void read_olmo2(const JsonObjectReader& config, DecoderArchitecture& arch) {
  arch.qk_norm = true;
  arch.qk_norm_full_width = true;
  arch.post_norms = true;
  if (config.has("rms_norm_eps")) (void)config.number_in_range("rms_norm_eps", 0.0, 1.0);
}

// GraniteConfig / GraniteMoeConfig (transformers/models/granite, granitemoe): the llama keys and attention_bias,
// mlp_bias (dense Granite only), read by the caller, and four scalars that change no tensor: embedding_multiplier
// (the embedding's output scaled), residual_multiplier (each branch scaled before its residual add),
// attention_multiplier (the scores' scale in place of 1/√head_dim) and logits_scaling (the logits divided). Each is
// one multiply over a tensor already counted, or folded into a kernel's scale argument; shardplan does not count
// them as kernels of their own.
void read_granite_scalars(const JsonObjectReader& config) {
  for (const std::string_view key :
       {"embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"}) {
    if (config.has(key)) (void)config.number_in_range(key, 1e-12, 1e12);
  }
}

}  // namespace shardplan
