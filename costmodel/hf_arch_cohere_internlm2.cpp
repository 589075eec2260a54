// Field mapping of the Hugging Face Cohere (Command-R, Command-R+) and InternLM2 configs onto the llama block.
#include "hf_arch.h"

#include <string_view>

namespace shardplan {

// CohereConfig (transformers/models/cohere/configuration_cohere.py) and modeling_cohere.py: the llama keys and
// attention_bias (q/k/v/o_proj: bias=config.attention_bias) read by the caller, tie_word_embeddings true by default
// (CohereForCausalLM's lm_head is embed_tokens'), and:
//   - CohereLayerNorm: a LayerNorm's mean and variance with a weight and no bias (bias=False), for the block's one
//     input_layernorm and CohereModel.norm;
//   - CohereDecoderLayer: hidden = residual + self_attn(ln(x)) + mlp(ln(x)), one norm feeding both branches;
//   - use_qk_norm (Command-R+): q_norm = CohereLayerNorm(hidden_size=(num_heads, head_dim)) and k_norm over
//     (num_key_value_heads, head_dim): a weight per head, not shared;
//   - logit_scale (0.0625 in Command-R): the logits multiplied, one multiply over a tensor already counted (as
//     Granite's logits_scaling, not a kernel of its own here).
void read_cohere(const JsonObjectReader& config, DecoderArchitecture& arch) {
  arch.layer_norm = true;
  arch.layer_norm_bias = false;
  arch.parallel_residual = true;
  arch.parallel_norms = 1;
  arch.o_proj_bias = arch.attention_bias;
  if (config.boolean("use_qk_norm", false)) {
    arch.qk_norm = true;
    arch.qk_norm_per_head_weights = true;
  }
  if (config.has("logit_scale")) (void)config.number_in_range("logit_scale", 1e-12, 1e12);
  if (config.has("layer_norm_eps")) (void)config.number_in_range("layer_norm_eps", 0.0, 1.0);
}

// InternLM2Config (internlm/internlm2-7b, internlm2_5-7b: configuration_internlm2.py, remote code) and
// modeling_internlm2.py: the llama keys read by the caller (tie_word_embeddings default false: `output` apart from
// tok_embeddings), and:
//   - InternLM2Attention.wqkv = Linear(hidden, (heads + 2 · kv_heads) · head_dim, bias=config.bias), q, k and v
//     interleaved per key/value group; wo = Linear(heads · head_dim, hidden, bias=config.bias). The config class
//     defaults bias to true; every released config sets false.
//   - InternLM2MLP: w1 (gate), w3 (up), w2 (down), bias=False; InternLM2RMSNorm attention_norm, ffn_norm, norm.
void read_internlm2(const JsonObjectReader& config, DecoderArchitecture& arch) {
  const bool bias = config.boolean("bias", true);
  arch.attention_bias = bias;
  arch.o_proj_bias = bias;
  arch.fused_qkv = true;
  arch.naming = DecoderArchitecture::Naming::internlm2;
  if (config.has("rms_norm_eps")) (void)config.number_in_range("rms_norm_eps", 0.0, 1.0);
}

}  // namespace shardplan
