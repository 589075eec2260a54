// MoeArchitecture and MoeLayerRouting: a mixture-of-experts MLP's hyper-parameters and one block's routing summary.
#pragma once

#include <cstdint>

namespace shardplan {

// Note [Capacity factor]: an expert computes at most capacity = capacity_factor · tokens · top_k / experts tokens
// per batch (GShard, Lepikhin et al. 2020 §2.2; Switch Transformer, Fedus et al. 2021 §2.2, Eq. (4): "capacity
// factor" 1.0 and 1.25 in Table 1). Hugging Face's MixtralSparseMoeBlock and Qwen2/3-MoE blocks are dropless: each
// expert runs exactly the tokens routed to it (index_select of `top_x`, no capacity), as MegaBlocks (Gale et al. 2022)
// and torchtitan's grouped-GEMM MoE are, so the expected work is top_k expert MLPs per token: factor 1.0, the
// default. A factor above 1 models padded, capacity-bound implementations (Switch/GShard-style, DeepSpeed-MoE's
// default capacity_factor 1.0 for training with drop_tokens): every expert computes its full capacity.
inline constexpr double kDroplessCapacityFactor = 1.0;

// How the reference implementation names the MoE block's modules (exports wrap by them).
enum class MoeNaming {
  mixtral,  // block_sparse_moe.gate, block_sparse_moe.experts.N.{w1,w2,w3} (MixtralSparseMoeBlock)
  qwen,     // mlp.gate, mlp.experts.N.{gate,up,down}_proj, mlp.shared_expert.*, mlp.shared_expert_gate
  deepseek, // mlp.gate, mlp.experts.N.{gate,up,down}_proj, mlp.shared_experts.* (DeepseekV2MoE, DeepseekV3MoE)
  // block_sparse_moe.router.layer, and every expert stacked in two 3-D parameters: input_linear [experts, 2·f, h]
  // (gate and up) and output_linear [experts, h, f] (GraniteMoeMoE, GraniteMoeParallelExperts)
  granite,
  // mlp.router (weight and bias), mlp.experts stacked: gate_up_proj [experts, h, 2·f] (gate and up interleaved),
  // gate_up_proj_bias [experts, 2·f], down_proj [experts, f, h], down_proj_bias [experts, h] (GptOssMLP,
  // GptOssTopKRouter, GptOssExperts)
  gpt_oss,
};

struct MoeArchitecture {
  MoeNaming naming = MoeNaming::mixtral;
  std::int64_t num_experts = 0;               // routed experts per MoE block (num_local_experts, num_experts)
  std::int64_t experts_per_token = 0;         // top-k (num_experts_per_tok)
  std::int64_t expert_intermediate_size = 0;  // each routed expert's SwiGLU width
  std::int64_t shared_intermediate_size = 0;  // the always-on shared expert's width (Qwen2-MoE); 0: none
  bool shared_expert_gate = false;            // Qwen2-MoE's sigmoid gate Linear(hidden, 1) on the shared expert
  // DeepSeek-V3's router bias for auxiliary-loss-free load balancing (DeepSeek-V3 report §2.1.2, Eq. (16)):
  // mlp.gate.e_score_correction_bias, one value per routed expert, used in top-k selection only.
  bool router_correction_bias = false;
  // Blocks are MoE when index % sparse_step == sparse_step - 1 and not in the first first_dense_layers
  // (Qwen2MoeDecoderLayer: decoder_sparse_step; DeepSeek: first_k_dense_replace).
  std::int64_t sparse_step = 1;
  std::int64_t first_dense_layers = 0;
  double capacity_factor = kDroplessCapacityFactor;  // Note [Capacity factor]

  bool is_sparse_layer(std::int64_t index) const {
    return index >= first_dense_layers && sparse_step > 0 && index % sparse_step == sparse_step - 1;
  }
  // Routed expert slots each token occupies: top_k × capacity factor (fractional for factors above 1).
  double slots_per_token() const { return static_cast<double>(experts_per_token) * capacity_factor; }
};

// What the planner needs of one MoE block: how many routed-expert parameters it holds (the part expert parallelism
// splits over its group) and how much each token sends to the experts (the all-to-alls' payload).
struct MoeLayerRouting {
  std::int64_t num_experts = 0;
  std::int64_t experts_per_token = 0;
  double capacity_factor = kDroplessCapacityFactor;
  std::int64_t hidden_size = 0;                // elements per token per routed slot, each way
  std::int64_t routed_expert_elements = 0;     // every routed expert's parameters (not the router or shared expert)
  bool operator==(const MoeLayerRouting&) const = default;
};

}  // namespace shardplan
