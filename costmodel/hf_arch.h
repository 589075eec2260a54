// The per-family hooks of the Hugging Face config import: each reads its family's keys onto the llama-family base.
#pragma once

#include "json_input.h"
#include "model_spec.h"

namespace shardplan {

// hf_arch_moe.cpp. MixtralForCausalLM: num_local_experts, num_experts_per_tok, intermediate_size (each expert's).
void read_mixtral_moe(const JsonObjectReader& config, DecoderArchitecture& arch);
// Qwen2MoeForCausalLM: num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size,
// decoder_sparse_step, mlp_only_layers (refused unless empty).
void read_qwen2_moe(const JsonObjectReader& config, DecoderArchitecture& arch);
// Qwen3MoeForCausalLM: as Qwen2-MoE without the shared expert; its attention is Qwen3's (read_qwen3_attention).
void read_qwen3_moe(const JsonObjectReader& config, DecoderArchitecture& arch);

// hf_arch_gemma.cpp. Gemma2ForCausalLM, Gemma3ForCausalLM (text): sandwich norms, final_logit_softcapping.
void read_gemma(const JsonObjectReader& config, DecoderArchitecture& arch);

}  // namespace shardplan
