// MlaArchitecture: the hyper-parameters of DeepSeek's Multi-head Latent Attention (DeepSeek-V2 paper §2.1).
#pragma once

#include <cstdint>

namespace shardplan {

// DeepSeek-V2 (DeepSeek-AI 2024, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language
// Model", §2.1.2-2.1.3, Eqs. (9)-(19)): keys and values come from one low-rank latent c_KV of width kv_lora_rank
// (W^DKV, then W^UK, W^UV), queries from a latent of width q_lora_rank (W^DQ, W^UQ) or, when it is 0 (DeepSeek-V2-Lite:
// q_lora_rank null), from a plain q_proj; each head's query and key are a non-positional part (qk_nope_head_dim) and a
// RoPE part (qk_rope_head_dim), the key's RoPE part shared by every head (W^KR); values are v_head_dim wide.
// transformers' DeepseekV2Attention / DeepseekV3Attention name them q_a_proj, q_a_layernorm, q_b_proj (or q_proj),
// kv_a_proj_with_mqa (W^DKV and W^KR stacked), kv_a_layernorm, kv_b_proj (W^UK and W^UV stacked), o_proj.
struct MlaArchitecture {
  std::int64_t q_lora_rank = 0;  // 0: no query compression (plain q_proj)
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  std::int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

}  // namespace shardplan
