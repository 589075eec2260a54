// Field mapping of the Hugging Face gpt-oss config (openai/gpt-oss-20b, gpt-oss-120b) onto the llama block.
#include "hf_arch.h"

#include <string>

namespace shardplan {

// GptOssConfig (transformers/models/gpt_oss/configuration_gpt_oss.py) and modeling_gpt_oss.py: the llama keys,
// head_dim (64, apart from hidden / heads), attention_bias (default true: q/k/v/o_proj) read by the caller, and:
//   - GptOssMLP: router = GptOssTopKRouter (weight [num_local_experts, hidden] and bias [num_local_experts]); experts
//     = GptOssExperts, stacked: gate_up_proj [E, hidden, 2·intermediate_size] with gate_up_proj_bias [E, 2·f],
//     down_proj [E, f, hidden] with down_proj_bias [E, hidden]; num_experts_per_tok experts per token (OpenAI's
//     config names it experts_per_token too). The expert activation is a clamped SwiGLU (swiglu_limit), priced as
//     SwiGLU.
//   - GptOssAttention.sinks: nn.Parameter of num_attention_heads per layer, one learned logit per head joining the
//     softmax's denominator.
//   - layer_types: "sliding_attention" layers attend to the last sliding_window (128) positions, "full_attention"
//     layers to all; None means alternating, sliding first (the released configs list exactly that). Note
//     [Sliding-window attention] in kernel_spec.h.
// Note [MXFP4 experts]: the released checkpoints store the expert weights (not their biases, the router, attention
// or embeddings: quantization_config.modules_to_not_convert) in MXFP4, as *_blocks (uint8, two 4-bit values a
// byte) and *_scales (uint8 E8M0, one per 32 values): 4.25 bits per weight, and the safetensors hold those uint8
// tensors, not one element per weight. shardplan counts logical parameters — each weight once, as the model
// trains it: training dequantises them to bf16 (transformers' Mxfp4Config(dequantize=True)), and fp32 master
// weights, gradients and optimizer states are kept per logical parameter. 20,914,757,184 for gpt-oss-20b and
// 116,829,156,672 for gpt-oss-120b, the model card's 20.91B and 116.83B total parameters.
void read_gpt_oss(const JsonObjectReader& config, DecoderArchitecture& arch) {
  arch.o_proj_bias = arch.attention_bias;
  MoeArchitecture moe;
  moe.naming = MoeNaming::gpt_oss;
  moe.num_experts = config.optional_int_in_range("num_local_experts", 1, 65536).value_or(128);
  moe.experts_per_token = config.optional_int_in_range("num_experts_per_tok", 1, moe.num_experts).value_or(4);
  if (config.has("experts_per_token") &&
      config.int_in_range("experts_per_token", 1, moe.num_experts) != moe.experts_per_token) {
    config.fail("experts_per_token", "num_experts_per_tok's value (" + std::to_string(moe.experts_per_token) + ")");
  }
  moe.expert_intermediate_size = arch.intermediate_size;
  arch.moe = moe;
  arch.attention_sinks = true;
  (void)config.non_negative_number("router_aux_loss_coef", 0.9);
  (void)config.boolean("output_router_logits", false);
  if (config.has("swiglu_limit")) (void)config.number_in_range("swiglu_limit", 0.0, 1e6);
  // layer_types: which layers slide; GptOssConfig's default: "sliding_attention" if bool((i + 1) % 2) else
  // "full_attention" (alternating, sliding first).
  read_sliding_layers(config, arch, read_nullable_window(config, 128),
                      [](std::int64_t i) { return (i + 1) % 2 != 0; });
}

}  // namespace shardplan
