// GPT-NeoX blocks counted from transformers' GPTNeoXLayer forward (models/gpt_neox/modeling_gpt_neox.py).
#include "neox_block.h"

#include <cmath>

#include "block_kernels.h"

namespace shardplan {

// GPTNeoXLayer: input_layernorm and post_attention_layernorm (LayerNorm, weight and bias); attention.query_key_value
// (Linear(h, 3h), bias: attention_bias, default true) and attention.dense (Linear(h, h), bias); mlp.dense_h_to_4h and
// mlp.dense_4h_to_h (Linear with biases), GeLU between. With use_parallel_residual (true in every Pythia and
// gpt-neox-20b config) the output is x + attention(ln1(x)) + mlp(ln2(x)) (Black et al. 2022, "GPT-NeoX-20B", §2.1:
// "we compute the Attention and Feed-Forward layers in parallel"); without, the llama-like sequential form. Rotary
// embeddings cover the first rotary_pct of each head's dims (§2.1: "applied to the first 25% of embedding vector
// dimensions"). The tensors and work are GPT-2's (Linear instead of Conv1D: transposed shapes), the kernels those of
// gpt2_block_kernels plus the partial RoPE on q and k.
LayerSpec gpt_neox_block(const DecoderArchitecture& arch, std::int64_t index) {
  const std::int64_t h = arch.hidden_size, f = arch.intermediate_size, heads = arch.num_heads;
  LayerSpec layer;
  layer.name = "gpt_neox.layers." + std::to_string(index);
  layer.kind = LayerKind::transformer_block;
  layer.tensors = {{"input_layernorm.weight", {h}},
                   {"input_layernorm.bias", {h}},
                   {"post_attention_layernorm.weight", {h}},
                   {"post_attention_layernorm.bias", {h}},
                   {"attention.query_key_value.weight", {3 * h, h}}};
  if (arch.attention_bias) layer.tensors.push_back({"attention.query_key_value.bias", {3 * h}});
  layer.tensors.push_back({"attention.dense.weight", {h, h}});
  if (arch.attention_bias) layer.tensors.push_back({"attention.dense.bias", {h}});
  layer.tensors.push_back({"mlp.dense_h_to_4h.weight", {f, h}});
  layer.tensors.push_back({"mlp.dense_h_to_4h.bias", {f}});
  layer.tensors.push_back({"mlp.dense_4h_to_h.weight", {h, f}});
  layer.tensors.push_back({"mlp.dense_4h_to_h.bias", {h}});
  layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(3 * h * h + h * h + 2 * h * f);
  layer.flops.attention_flops_per_token_per_position = 4.0 * static_cast<double>(h);
  // Kept for backward, per token (Korthikanti §4.2 as gpt2_block counts it: 8h + 2f, no dropout in the released
  // configs): with the parallel residual both norms read the same block input, kept once (7h + 2f).
  layer.activations.elements_per_token = static_cast<double>((arch.parallel_residual ? 7 : 8) * h + 2 * f);
  layer.activations.score_elements_per_token_per_position = static_cast<double>(heads);
  layer.activations.flash_stat_bytes_per_token = 4.0 * static_cast<double>(heads);
  layer.activations.checkpoint_elements_per_token = static_cast<double>(h);
  LayerKernelSpec spec = gpt2_block_kernels(arch);
  spec.projections = {{"attention.query_key_value", h, 3 * h, true},
                      {"attention.dense", h, h, false},
                      {"mlp.dense_h_to_4h", h, f, true},
                      {"mlp.dense_4h_to_h", f, h, false}};
  // apply_rotary_pos_emb on the rotary part of q and k (10w per tensor of width w, as block_kernels.cpp counts RoPE),
  // then cat with the pass-through part (read and write 2h each for q and k).
  const double rotary_width = std::floor(static_cast<double>(arch.head_dim()) * arch.rotary_fraction) *
                              static_cast<double>(heads);
  ElementwiseSpec rotary;
  rotary.name = "partial rotary";
  rotary.forward = {10.0 * 2.0 * rotary_width + 4.0 * static_cast<double>(h), 0.0, 0.0, 12};
  rotary.backward = {2.0 * rotary.forward.act_elements, 0.0, 0.0, 24};
  spec.elementwise.insert(spec.elementwise.begin() + 1, rotary);
  layer.kernels = spec;
  layer.activations.selective_op_elements_per_token = selective_op_kept_elements(*layer.kernels, h);
  return layer;
}

}  // namespace shardplan
