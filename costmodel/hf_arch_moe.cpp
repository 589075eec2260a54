// Field mapping of the Hugging Face MoE configs (Mixtral, Qwen2-MoE, Qwen3-MoE) onto MoeArchitecture.
#include "hf_arch.h"

#include "input_limits.h"

namespace shardplan {
namespace {

// The keys every transformers MoE config names the same way. Top-k is read against the expert count, so it cannot
// name more experts than exist.
MoeArchitecture routed_experts(const JsonObjectReader& config, std::string_view experts_key) {
  MoeArchitecture moe;
  moe.num_experts = config.int_in_range(experts_key, 1, 65536);
  moe.experts_per_token = config.int_in_range("num_experts_per_tok", 1, moe.num_experts);
  return moe;
}

// Qwen2MoeDecoderLayer: a layer is sparse when it is not in mlp_only_layers, num_experts > 0 and
// (index + 1) % decoder_sparse_step == 0. Only an empty mlp_only_layers is expressible as a step.
void read_qwen_sparse_layers(const JsonObjectReader& config, MoeArchitecture& moe) {
  moe.sparse_step = config.optional_int_in_range("decoder_sparse_step", 1, limits::kMaxLayers).value_or(1);
  if (config.has("mlp_only_layers") && !config.raw().at("mlp_only_layers").is_null() &&
      !config.array("mlp_only_layers", true).empty()) {
    config.fail("mlp_only_layers", "an empty list (dense layers among the MoE layers are not supported)");
  }
}

// Router keys that change no parameter count, read so a malformed value is refused rather than half-read: the
// load-balancing loss coefficient, whether the router logits are returned, whether top-k weights are renormalised.
void check_router_keys(const JsonObjectReader& config) {
  (void)config.non_negative_number("router_aux_loss_coef", 0.0);
  (void)config.boolean("output_router_logits", false);
  (void)config.boolean("norm_topk_prob", false);
}

// What Qwen2-MoE and Qwen3-MoE name alike: num_experts, num_experts_per_tok, moe_intermediate_size per expert, the
// sparse-layer keys and the router keys.
MoeArchitecture qwen_routed_experts(const JsonObjectReader& config) {
  check_router_keys(config);
  MoeArchitecture moe = routed_experts(config, "num_experts");
  moe.naming = MoeNaming::qwen;
  moe.expert_intermediate_size = config.int_in_range("moe_intermediate_size", 1, limits::kMaxIntermediateSize);
  read_qwen_sparse_layers(config, moe);
  return moe;
}

// What MixtralConfig, GraniteMoeConfig and PhimoeConfig name alike: num_local_experts (default 8; Phi-MoE's 16) and
// num_experts_per_tok (default 2), every layer sparse, each expert a SwiGLU of intermediate_size.
MoeArchitecture local_experts(const JsonObjectReader& config, const DecoderArchitecture& arch, MoeNaming naming,
                              std::int64_t default_experts = 8) {
  check_router_keys(config);
  MoeArchitecture moe;
  moe.naming = naming;
  moe.num_experts = config.optional_int_in_range("num_local_experts", 1, 65536).value_or(default_experts);
  moe.experts_per_token = config.optional_int_in_range("num_experts_per_tok", 1, moe.num_experts).value_or(2);
  moe.expert_intermediate_size = arch.intermediate_size;
  return moe;
}

}  // namespace

// MixtralConfig (transformers/models/mixtral/configuration_mixtral.py): num_local_experts (default 8),
// num_experts_per_tok (default 2); each expert is a SwiGLU of intermediate_size (MixtralBlockSparseTop2MLP: w1, w3
// hidden → ffn_dim, w2 back); every layer is sparse; MixtralAttention has no biases.
void read_mixtral_moe(const JsonObjectReader& config, DecoderArchitecture& arch) {
  arch.moe = local_experts(config, arch, MoeNaming::mixtral);
  arch.attention_bias = false;
}

// PhimoeConfig (transformers/models/phimoe/configuration_phimoe.py, modular_phimoe.py): Mixtral's experts
// (num_local_experts default 16, num_experts_per_tok 2; the released checkpoint names them block_sparse_moe.experts.N.
// {w1,w2,w3} and block_sparse_moe.gate), PhimoeAttention being LlamaAttention (attention_bias on q, k, v and o_proj,
// set by the caller), nn.LayerNorm with weight and bias for every norm, and lm_head with bias=config.lm_head_bias.
// The sparsemixer router's jitter keys change no tensor.
void read_phimoe(const JsonObjectReader& config, DecoderArchitecture& arch) {
  MoeArchitecture moe = local_experts(config, arch, MoeNaming::mixtral, 16);
  (void)config.non_negative_number("router_jitter_noise", 0.01);
  (void)config.non_negative_number("input_jitter_noise", 0.0);
  arch.moe = moe;
  arch.layer_norm = true;
  arch.lm_head_bias = config.boolean("lm_head_bias", false);
  if (arch.lm_head_bias && arch.tie_word_embeddings) {
    config.fail("lm_head_bias", "false with tie_word_embeddings (a tied head's bias is not modelled)");
  }
}

// Qwen2MoeConfig: num_experts, num_experts_per_tok, moe_intermediate_size per expert; one shared expert of
// shared_expert_intermediate_size gated by Linear(hidden, 1) (Qwen2MoeSparseMoeBlock.shared_expert_gate); dense
// layers (none in the released checkpoints) use intermediate_size. Qwen2MoeAttention has q/k/v biases: bias=True in
// the released code, config.qkv_bias (default true) in transformers' current configuration_qwen2_moe.py; o_proj none.
void read_qwen2_moe(const JsonObjectReader& config, DecoderArchitecture& arch) {
  MoeArchitecture moe = qwen_routed_experts(config);
  moe.shared_intermediate_size =
      config.int_in_range("shared_expert_intermediate_size", 1, limits::kMaxIntermediateSize);
  moe.shared_expert_gate = true;
  arch.attention_bias = config.boolean("qkv_bias", true);
  arch.moe = moe;
}

// GraniteMoeConfig (transformers/models/granitemoe/configuration_granitemoe.py): num_local_experts (default 8),
// num_experts_per_tok (default 2), each expert a SwiGLU of intermediate_size, every layer sparse. GraniteMoeMoE holds
// them stacked: input_linear (GraniteMoeParallelExperts(experts, hidden, 2·intermediate)), output_linear
// (experts, intermediate, hidden) and router.layer (Linear(hidden, experts, bias=False)): Mixtral's count.
void read_granitemoe(const JsonObjectReader& config, DecoderArchitecture& arch) {
  arch.moe = local_experts(config, arch, MoeNaming::granite);
}

// Qwen3MoeConfig: as Qwen2-MoE without a shared expert (Qwen3MoeSparseMoeBlock: gate and experts only).
void read_qwen3_moe(const JsonObjectReader& config, DecoderArchitecture& arch) {
  arch.moe = qwen_routed_experts(config);
}

}  // namespace shardplan
