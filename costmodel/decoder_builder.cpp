// Builds llama-family and GPT-2 decoders layer by layer: tensors as in the Hugging Face modules, FLOPs, activations.
#include "decoder_builder.h"

#include "block_kernels.h"
#include "block_naming.h"
#include "compiled_block.h"
#include "mla_block.h"
#include "neox_block.h"
#include "moe_block.h"

#include "errors.h"
#include "input_limits.h"

namespace shardplan {
namespace {

LayerSpec make_layer(std::string name, LayerKind kind) {
  LayerSpec layer;
  layer.name = std::move(name);
  layer.kind = kind;
  return layer;
}

void check_architecture(const DecoderArchitecture& arch, const std::string& origin) {
  // Note [Input limits]: far beyond any published model, they keep every parameter count and FLOP product in 64 bits.
  const auto require_in_range = [&](std::int64_t value, const char* field, std::int64_t most) {
    if (value < 1 || value > most) {
      throw InputError(origin + ": field '" + field + "': expected a positive integer at most " + std::to_string(most) +
                       ", got " + std::to_string(value));
    }
  };
  require_in_range(arch.vocab_size, "vocab_size", limits::kMaxVocabSize);
  require_in_range(arch.hidden_size, "hidden_size", limits::kMaxHiddenSize);
  require_in_range(arch.intermediate_size, "intermediate_size", limits::kMaxIntermediateSize);
  require_in_range(arch.num_layers, "num_layers", limits::kMaxLayers);
  require_in_range(arch.num_heads, "num_heads", limits::kMaxHeads);
  require_in_range(arch.num_kv_heads, "num_kv_heads", limits::kMaxHeads);
  require_in_range(arch.max_position_embeddings, "max_position_embeddings", limits::kMaxPositions);
  if (arch.explicit_head_dim != 0) {
    require_in_range(arch.explicit_head_dim, "head_dim", limits::kMaxHiddenSize);
    require_in_range(arch.explicit_head_dim * arch.num_heads, "head_dim * num_heads", limits::kMaxHiddenSize);
  } else if (arch.hidden_size % arch.num_heads != 0) {
    throw InputError(origin + ": field 'num_heads': expected a divisor of hidden_size " +
                     std::to_string(arch.hidden_size) + ", got " + std::to_string(arch.num_heads));
  }
  if (arch.num_heads % arch.num_kv_heads != 0) {
    throw InputError(origin + ": field 'num_kv_heads': expected a divisor of num_heads " +
                     std::to_string(arch.num_heads) + ", got " + std::to_string(arch.num_kv_heads));
  }
  if (!(arch.rotary_fraction > 0 && arch.rotary_fraction <= 1)) {
    throw InputError(origin + ": field 'rotary_pct': expected a share of the head dims in (0, 1]");
  }
  if (arch.dropout < 0 || arch.dropout >= 1) throw InputError(origin + ": field 'dropout': expected 0 <= p < 1");
  if (!(arch.final_logit_softcap >= 0 && arch.final_logit_softcap < 1e6)) {
    throw InputError(origin + ": field 'final_logit_softcapping': expected a non-negative cap");
  }
  if ((arch.layer_norm || arch.lm_head_bias || arch.post_norms || arch.mlp_bias || arch.o_proj_bias) &&
      arch.family != DecoderArchitecture::Family::llama) {
    throw InputError(origin + ": field 'family': expected 'llama' for LayerNorms, post-norms, o_proj, MLP and "
                     "lm_head biases (they shape llama's block)");
  }
  if ((!arch.gated_mlp || arch.fused_qkv || arch.naming != DecoderArchitecture::Naming::llama ||
       arch.sliding_window != 0 || arch.attention_sinks || !arch.layer_norm_bias) &&
      arch.family != DecoderArchitecture::Family::llama) {
    throw InputError(origin + ": field 'family': expected 'llama' for two-matrix MLPs, fused q/k/v, sliding windows, "
                     "attention sinks and bias-free LayerNorms (they shape llama's block)");
  }
  if (arch.sliding_window < 0 || arch.sliding_window > limits::kMaxPositions) {
    throw InputError(origin + ": field 'sliding_window': expected 0 (none) or a window of at most " +
                     std::to_string(limits::kMaxPositions) + " positions");
  }
  if (!arch.sliding_layers.empty() && static_cast<std::int64_t>(arch.sliding_layers.size()) != arch.num_layers) {
    throw InputError(origin + ": field 'layer_types': expected one entry per layer (" +
                     std::to_string(arch.num_layers) + "), got " + std::to_string(arch.sliding_layers.size()));
  }
  if (arch.parallel_norms != 1 && arch.parallel_norms != 2) {
    throw InputError(origin + ": field 'num_ln_in_parallel_attn': expected 1 or 2");
  }
  if (arch.moe && !arch.gated_mlp) {
    throw InputError(origin + ": field 'moe': expected gated experts (a two-matrix MLP has no MoE variant here)");
  }
  if (arch.moe && arch.fused_projections) {
    throw InputError(origin + ": field 'moe': expected separate projections (fused ones have no MoE variant here)");
  }
  if (arch.moe && arch.family != DecoderArchitecture::Family::llama) {
    throw InputError(origin + ": field 'moe': expected a llama-family decoder (GPT-2 blocks have no MoE variant)");
  }
  if (arch.mla) {
    const MlaArchitecture& mla = *arch.mla;
    if (arch.fused_projections || arch.qk_norm || arch.sandwich_norms || arch.attention_bias ||
        arch.family != DecoderArchitecture::Family::llama) {
      throw InputError(origin + ": field 'kv_lora_rank': expected a DeepSeek decoder (multi-head latent attention "
                       "has no fused, q/k-normed, sandwich-normed, biased or GPT-2 variant here)");
    }
    if (mla.q_lora_rank < 0 || mla.q_lora_rank > limits::kMaxHiddenSize) {
      throw InputError(origin + ": field 'q_lora_rank': expected 0 (none) or a positive integer at most " +
                       std::to_string(limits::kMaxHiddenSize));
    }
    require_in_range(mla.kv_lora_rank, "kv_lora_rank", limits::kMaxHiddenSize);
    require_in_range(mla.qk_nope_head_dim, "qk_nope_head_dim", 65536);
    require_in_range(mla.qk_rope_head_dim, "qk_rope_head_dim", 65536);
    require_in_range(mla.v_head_dim, "v_head_dim", 65536);
    require_in_range(arch.num_heads * (mla.qk_head_dim() + mla.v_head_dim), "num_heads * (qk_head_dim + v_head_dim)",
                     limits::kMaxHiddenSize);
  }
  check_moe_architecture(arch, origin);
}

// `adds_to_input`: GPT-2's position embedding, added onto the token embedding.
LayerSpec embedding_layer(const std::string& name, std::int64_t rows, std::int64_t hidden, double dropout,
                          bool adds_to_input) {
  LayerSpec layer = make_layer(name, LayerKind::embedding);
  layer.tensors = {{"weight", {rows, hidden}}};
  // A lookup, no matmul; GPT-2's embedding dropout keeps a 1-byte mask per element (Korthikanti §4.2).
  layer.activations.mask_bytes_per_token = dropout > 0 ? static_cast<double>(hidden) : 0.0;
  layer.kernels = embedding_kernels(hidden, adds_to_input, dropout);
  return layer;
}

// Note [Eager composite activations] for the llama block, as HF's modeling_llama runs it with
// attn_implementation="eager" (LlamaRMSNorm, apply_rotary_pos_emb, repeat_kv, eager_attention_forward, LlamaMLP). What
// each op's autograd node saves is tools/autograd/derivatives.yaml's: a node keeps an input or its result only where
// a gradient formula names it, and mul.Tensor names `other` for self's gradient and `self` for other's.
//   LlamaRMSNorm: x.to(float32) (a copy under bf16/fp16; _to_copy saves nothing) → pow(2) saves its input, the fp32
//     x → mean (nothing since pytorch/pytorch#109935, torch 2.2; 1.13-2.1 kept its input x², pytorch#109876) → + eps
//     → rsqrt saves its result, one fp32 per row → x · rsqrt (mul saves both, already kept) → .to(dtype) → weight · it
//     saves it, the activation-dtype x·rsqrt (for the weight's gradient). The weighted output is what the projections
//     keep (elements_per_token). So beyond elements_per_token: x·rsqrt, and the rsqrt, and the input in fp32.
//   RoPE: q·cos + rotate_half(q)·sin saves cos and sin only (q needs no gradient from them); they are
//     LlamaModel.rotary_emb's 1 × s × head_dim tables, computed once per forward and shared by every layer and every
//     sequence of the batch: 2·s·head_dim elements per micro-batch for the whole model, not per token of a block
//     (Llama 3 8B: 256 per token at micro-batch 1 for all 32 layers, beside ~90k per layer), and not counted.
//   repeat_kv: expand + reshape copies k and v to every query head (n_rep = heads / kv_heads; none when 1), and
//     matmul's bmm saves both operands: q after RoPE (q), kᵀ and v at q width each. elements_per_token counts 2·kv.
//   softmax(dtype=float32) saves its fp32 result (heads × s per token); .to(q.dtype) casts it back and P·V's bmm saves
//     the cast (the score elements); in fp32 they are one tensor. The scaling (mul by a Python scalar) and the mask
//     add save nothing; dropout with p = 0 returns its input.
//   LlamaMLP: silu saves its input (gate output), mul its two inputs (silu output, up output), down_proj its input:
//     the 4f of elements_per_token, as counted.
// Qwen3's q_norm/k_norm are the same RMSNorm over each head (heads + kv_heads rows); Gemma's sandwich norms are
// counted as LlamaRMSNorm (Gemma2RMSNorm keeps x·rsqrt in fp32, 2 bytes more per element under bf16: not modelled).
// DeepSeek's MLA norms (q_a_layernorm, kv_a_layernorm) are not counted here; MLA's k and v are per head already.
void set_eager_llama_block_activations(const DecoderArchitecture& arch, ActivationFootprint& kept) {
  const std::int64_t h = arch.hidden_size, q = arch.q_dim(), kv = arch.kv_dim();
  const std::int64_t hidden_norms = arch.sandwich_norms ? 4 : 2;
  const std::int64_t head_norm_width = arch.qk_norm ? q + kv : 0;
  // One rsqrt per row: a row per head for Qwen3's per-head norms, one for each of OLMo 2's full-width q and k norms.
  const std::int64_t head_norm_rows = !arch.qk_norm ? 0 : arch.qk_norm_full_width ? 2 : arch.num_heads + arch.num_kv_heads;
  // Phi-3.5-MoE's nn.LayerNorm is one fused op (F.layer_norm) that keeps its input (counted) and a mean and rstd per
  // row in fp32, none of LlamaRMSNorm's composite tensors.
  const std::int64_t rms_hidden_norms = arch.layer_norm ? 0 : hidden_norms;
  kept.eager_norm_elements_per_token = static_cast<double>(rms_hidden_norms * h + head_norm_width);
  kept.eager_norm_fp32_elements_per_token =
      static_cast<double>((arch.layer_norm ? 2 * hidden_norms : hidden_norms) + head_norm_rows);
  kept.eager_upcast_elements_per_token = static_cast<double>(rms_hidden_norms * h + head_norm_width);
  kept.eager_attention_elements_per_token = arch.mla ? 0.0 : static_cast<double>(2 * (q - kv));
  kept.eager_score_fp32_elements_per_token_per_position = static_cast<double>(arch.num_heads);
}

// Llama / Mistral / Qwen2 block: RMSNorm → attention (GQA, RoPE) → residual → RMSNorm → SwiGLU MLP → residual; and
// the variants the flags name (Note [Block naming] in block_naming.h for the module paths): LayerNorms with or without
// biases, a parallel block (x + attention(norm(x)) + mlp(norm'(x))), a two-matrix GELU MLP, fused q/k/v.
LayerSpec llama_block(const DecoderArchitecture& arch, std::int64_t index) {
  // q is the query heads' width: hidden_size unless the config gives head_dim apart (Qwen3).
  const std::int64_t h = arch.hidden_size, q = arch.q_dim(), kv = arch.kv_dim(), f = arch.intermediate_size;
  const BlockNames n = block_names(arch);
  LayerSpec layer = make_layer(n.layers + std::to_string(index), LayerKind::transformer_block);
  auto& t = layer.tensors;
  const bool norm_bias = arch.layer_norm && arch.layer_norm_bias;  // Phi-3.5-MoE, StarCoder2, Falcon: nn.LayerNorm
  const auto add_norm = [&](const std::string& name) {
    t.push_back({name + ".weight", {h}});
    if (norm_bias) t.push_back({name + ".bias", {h}});
  };
  if (arch.parallel_residual && arch.parallel_norms == 2) {  // Falcon's new_decoder_architecture: ln_attn, ln_mlp
    add_norm("ln_attn");
    add_norm("ln_mlp");
  } else if (!arch.post_norms) {  // OLMo 2 has none before attention
    add_norm(n.input_norm);
  }
  const std::string attn = n.attention + ".", mlp = n.mlp + ".";
  const bool fused_qkv = arch.fused_projections || arch.fused_qkv;
  if (fused_qkv) {  // Phi3Attention.qkv_proj: out = heads·head_dim + 2·kv_heads·head_dim (Falcon, InternLM2 alike)
    t.push_back({attn + n.qkv + ".weight", {q + 2 * kv, h}});
  } else {
    t.push_back({attn + n.q + ".weight", {q, h}});
    t.push_back({attn + n.k + ".weight", {kv, h}});
    t.push_back({attn + n.v + ".weight", {kv, h}});
  }
  if (arch.attention_bias) {  // Qwen2: biases on q, k, v only; Llama's attention_bias adds o_proj's below
    if (fused_qkv) {
      t.push_back({attn + n.qkv + ".bias", {q + 2 * kv}});
    } else {
      t.push_back({attn + n.q + ".bias", {q}});
      t.push_back({attn + n.k + ".bias", {kv}});
      t.push_back({attn + n.v + ".bias", {kv}});
    }
  }
  t.push_back({attn + n.o + ".weight", {h, q}});
  if (arch.o_proj_bias) t.push_back({attn + n.o + ".bias", {h}});
  if (arch.qk_norm) {  // Qwen3Attention: q_norm and k_norm are RMSNorm(head_dim), shared by the heads; OLMo 2's
                       // span every head (RMSNorm(heads·head_dim), RMSNorm(kv_heads·head_dim)); Cohere's
                       // CohereLayerNorm((heads, head_dim)) has a weight per head
    const std::int64_t d = arch.head_dim();
    if (arch.qk_norm_per_head_weights) {
      t.push_back({attn + "q_norm.weight", {arch.num_heads, d}});
      t.push_back({attn + "k_norm.weight", {arch.num_kv_heads, d}});
    } else {
      t.push_back({attn + "q_norm.weight", {arch.qk_norm_full_width ? q : d}});
      t.push_back({attn + "k_norm.weight", {arch.qk_norm_full_width ? kv : d}});
    }
  }
  if (arch.attention_sinks) t.push_back({attn + "sinks", {arch.num_heads}});  // GptOssAttention.sinks
  if (!arch.parallel_residual) add_norm(n.post_attention_norm);
  if (arch.sandwich_norms) t.push_back({"pre_feedforward_layernorm.weight", {h}});  // Gemma2DecoderLayer
  if (arch.sandwich_norms || arch.post_norms) {  // Gemma 2/3 and OLMo 2: RMSNorm(hidden) on the MLP's output
    t.push_back({"post_feedforward_layernorm.weight", {h}});
  }
  if (!arch.gated_mlp) {  // Starcoder2MLP, FalconMLP: up → GELU → down
    t.push_back({mlp + n.up + ".weight", {f, h}});
    if (arch.mlp_bias) t.push_back({mlp + n.up + ".bias", {f}});
    t.push_back({mlp + n.down + ".weight", {h, f}});
    if (arch.mlp_bias) t.push_back({mlp + n.down + ".bias", {h}});
  } else if (arch.fused_projections) {  // Phi3MLP.gate_up_proj: gate and up stacked, chunked after the GEMM
    t.push_back({mlp + n.gate_up + ".weight", {2 * f, h}});
  } else {
    t.push_back({mlp + n.gate + ".weight", {f, h}});
    t.push_back({mlp + n.up + ".weight", {f, h}});
  }
  if (arch.gated_mlp) t.push_back({mlp + n.down + ".weight", {h, f}});
  if (arch.gated_mlp && arch.mlp_bias) {  // LlamaMLP with config.mlp_bias: every projection has a bias
    if (arch.fused_projections) {
      t.push_back({mlp + n.gate_up + ".bias", {2 * f}});
    } else {
      t.push_back({mlp + n.gate + ".bias", {f}});
      t.push_back({mlp + n.up + ".bias", {f}});
    }
    t.push_back({mlp + n.down + ".bias", {h}});
  }
  // 2 FLOPs per multiply-add over every weight matrix (biases and norms are negligible and not counted).
  const std::int64_t mlp_matrices = arch.gated_mlp ? 3 : 2;
  layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(h * q + 2 * h * kv + q * h + mlp_matrices * h * f);
  layer.flops.attention_flops_per_token_per_position = 4.0 * static_cast<double>(q);
  // Kept for backward, per token (Korthikanti §4.2's accounting applied to this block: the tensors backward needs):
  // attention: norm input h, q/k/v projection input h, q after RoPE q, k and v 2·kv, o_proj input q (Qwen3's q/k
  // norms keep their inputs too: q + kv); MLP: norm input h, gate/up input h, gate output f, SiLU output f, up output
  // f, down_proj input f. No dropout. This is what a fused path keeps (flash/SDPA, torchtitan); eager HF code keeps
  // more (set_eager_llama_block_activations above).
  // Gemma's sandwich norms keep their inputs: the attention output and the MLP output (2h).
  // A two-matrix MLP keeps up's input (counted above), the GELU's input and output (2f), as GPT-2's (Korthikanti §4.2).
  // A parallel block's branches read one normed input (Cohere, Falcon's parallel_attn: norm input and output, 2h) or
  // two from the same block input (Falcon's new_decoder_architecture: 3h), as GPT-NeoX's parallel residual (7h).
  const std::int64_t hidden_kept = !arch.parallel_residual ? 4 * h : arch.parallel_norms == 2 ? 3 * h : 2 * h;
  layer.activations.elements_per_token =
      static_cast<double>(hidden_kept + 2 * q + 2 * kv + (arch.gated_mlp ? 4 : 2) * f + (arch.qk_norm ? q + kv : 0) +
                          (arch.sandwich_norms ? 2 * h : 0));
  layer.activations.score_elements_per_token_per_position = static_cast<double>(arch.num_heads);  // softmax output
  if (arch.dropout > 0) {  // StarCoder2's residual and attention dropouts, as gpt2_block counts GPT-2's
    layer.activations.mask_bytes_per_token = 2.0 * static_cast<double>(h);
    layer.activations.score_elements_per_token_per_position = 2.0 * static_cast<double>(arch.num_heads);
    layer.activations.score_mask_bytes_per_token_per_position = static_cast<double>(arch.num_heads);
  }
  layer.activations.flash_stat_bytes_per_token = 4.0 * static_cast<double>(arch.num_heads);  // fp32 log-sum-exp
  layer.activations.checkpoint_elements_per_token = static_cast<double>(h);
  set_eager_llama_block_activations(arch, layer.activations);
  layer.kernels = llama_block_kernels(arch);
  if (arch.is_sliding_layer(index)) {  // Note [Sliding-window attention] (kernel_spec.h)
    layer.flops.attention_window = arch.sliding_window;
    layer.kernels->attention->window = arch.sliding_window;
  }
  layer.activations.selective_op_elements_per_token = selective_op_kept_elements(*layer.kernels, h);
  const CompiledBlockSavings compiled = compiled_llama_block_savings(arch, *layer.kernels);
  layer.activations.compiled_recomputed_elements_per_token = compiled.recomputed_elements_per_token;
  layer.activations.compiled_unread_selective_op_elements_per_token = compiled.unread_selective_op_elements_per_token;
  return layer;
}

// GPT-2 block: LayerNorm → attention (fused c_attn) → dropout → residual → LayerNorm → GeLU MLP → dropout → residual.
LayerSpec gpt2_block(const DecoderArchitecture& arch, std::int64_t index) {
  const std::int64_t h = arch.hidden_size, f = arch.intermediate_size, heads = arch.num_heads;
  LayerSpec layer = make_layer("transformer.h." + std::to_string(index), LayerKind::transformer_block);
  layer.tensors = {{"ln_1.weight", {h}},        {"ln_1.bias", {h}},           {"attn.c_attn.weight", {h, 3 * h}},
                   {"attn.c_attn.bias", {3 * h}}, {"attn.c_proj.weight", {h, h}}, {"attn.c_proj.bias", {h}},
                   {"ln_2.weight", {h}},        {"ln_2.bias", {h}},           {"mlp.c_fc.weight", {h, f}},
                   {"mlp.c_fc.bias", {f}},      {"mlp.c_proj.weight", {f, h}}, {"mlp.c_proj.bias", {h}}};
  layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(3 * h * h + h * h + 2 * h * f);
  layer.flops.attention_flops_per_token_per_position = 4.0 * static_cast<double>(h);
  // Korthikanti et al. 2022 §4.2, per token: attention 5h (QKV input, Q, K, V, projection input), MLP h + 2f (input,
  // GeLU input and output), two LayerNorm inputs 2h → 16h elements for f = 4h, i.e. 32h bytes in 16-bit; dropout masks
  // after attention and MLP add 2h bytes: 34h. The s² terms: softmax output and its dropout output (2·a elements per
  // position) and the dropout mask (a bytes per position): 5as bytes in 16-bit.
  const bool has_dropout = arch.dropout > 0;
  layer.activations.elements_per_token = static_cast<double>(8 * h + 2 * f);
  layer.activations.mask_bytes_per_token = has_dropout ? 2.0 * static_cast<double>(h) : 0.0;
  layer.activations.score_elements_per_token_per_position = static_cast<double>((has_dropout ? 2 : 1) * heads);
  layer.activations.score_mask_bytes_per_token_per_position = has_dropout ? static_cast<double>(heads) : 0.0;
  layer.activations.flash_stat_bytes_per_token = 4.0 * static_cast<double>(heads);
  layer.activations.checkpoint_elements_per_token = static_cast<double>(h);
  layer.kernels = gpt2_block_kernels(arch);
  layer.activations.selective_op_elements_per_token = selective_op_kept_elements(*layer.kernels, h);
  return layer;
}

// `is_layer_norm`: nn.LayerNorm (GPT-2, Phi-3.5-MoE, StarCoder2, Falcon; Cohere's without a bias), else RMSNorm.
LayerSpec final_norm(const std::string& name, std::int64_t hidden, bool is_layer_norm, bool with_bias) {
  LayerSpec layer = make_layer(name, LayerKind::norm);
  layer.tensors = {{"weight", {hidden}}};
  if (with_bias) layer.tensors.push_back({"bias", {hidden}});
  layer.activations.elements_per_token = static_cast<double>(hidden);  // its input
  if (!is_layer_norm) {  // LlamaRMSNorm (model.norm) in eager: Note [Eager composite activations] above
    layer.activations.eager_norm_elements_per_token = static_cast<double>(hidden);
    layer.activations.eager_norm_fp32_elements_per_token = 1.0;
    layer.activations.eager_upcast_elements_per_token = static_cast<double>(hidden);
  }
  layer.kernels = final_norm_kernels(hidden, is_layer_norm);
  return layer;
}

// `name`: GPTNeoXForCausalLM calls its head embed_out.
LayerSpec lm_head(const DecoderArchitecture& arch, std::optional<std::size_t> tied_to, const std::string& name) {
  const std::int64_t h = arch.hidden_size, vocab = arch.vocab_size;
  LayerSpec layer = make_layer(name, LayerKind::lm_head);
  layer.tied_to_layer = tied_to;
  if (!tied_to) layer.tensors = {{"weight", {vocab, h}}};
  if (!tied_to && arch.lm_head_bias) layer.tensors.push_back({"bias", {vocab}});  // Phi-3.5-MoE
  layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(h * vocab);
  // Input h and logits V in the activation dtype, plus the fp32 upcast of the logits for the cross-entropy
  // (Korthikanti §4.3: 4sbv bytes for the loss).
  layer.activations.elements_per_token = static_cast<double>(h + vocab);
  layer.activations.fp32_bytes_per_token = 4.0 * static_cast<double>(vocab);
  // The loss in fp32 (HF ForCausalLMLoss, torchtitan's cross_entropy_loss: cross_entropy(logits.float(), ...)): the
  // upcast copy lives beside log_softmax's output until log_softmax has run. In backward nll_loss's gradient (a
  // zero-filled fp32 V per token with one entry set) and log_softmax's (fp32) are alive together while the latter is
  // computed; the cast of the result back to the activation dtype comes after the first is freed, and is smaller.
  layer.activations.forward_workspace_fp32_per_token = static_cast<double>(vocab);
  layer.activations.backward_workspace_fp32_per_token = 2.0 * static_cast<double>(vocab);
  layer.kernels = lm_head_kernels(h, vocab);
  if (arch.final_logit_softcap > 0) {
    // Gemma2ForCausalLM.forward: logits / cap, tanh, · cap on the activation-dtype logits before the loss (three
    // kernels reading and writing V each); tanh's backward needs its output, kept (V).
    const auto v = static_cast<double>(vocab);
    ElementwiseSpec softcap;
    softcap.name = "final logit soft-capping";
    softcap.forward = {6.0 * v, 0.0, 0.0, 3};
    softcap.backward = {7.0 * v, 0.0, 0.0, 3};
    layer.kernels->elementwise.insert(layer.kernels->elementwise.begin(), softcap);
    layer.activations.elements_per_token += v;
  }
  return layer;
}

}  // namespace

ModelSpec build_decoder(const std::string& name, const DecoderArchitecture& arch, const std::string& origin) {
  check_architecture(arch, origin);
  ModelSpec model;
  model.name = name;
  model.hidden_size = arch.hidden_size;
  model.vocab_size = arch.vocab_size;
  model.num_heads = arch.num_heads;
  // Default training length: the model's context, capped at 8192 (what Llama 3 was pre-trained at).
  model.default_seq_len = std::min<std::int64_t>(arch.max_position_embeddings, 8192);
  model.architecture = arch;
  const bool gpt2 = arch.family == DecoderArchitecture::Family::gpt2;
  const bool neox = arch.family == DecoderArchitecture::Family::gpt_neox;
  if (neox) {  // GPTNeoXModel: embed_in, layers, final_layer_norm; GPTNeoXForCausalLM.embed_out (no position table)
    model.layers.push_back(embedding_layer("gpt_neox.embed_in", arch.vocab_size, arch.hidden_size, 0.0, false));
    for (std::int64_t index = 0; index < arch.num_layers; ++index) model.layers.push_back(gpt_neox_block(arch, index));
    model.layers.push_back(final_norm("gpt_neox.final_layer_norm", arch.hidden_size, true, true));
    model.layers.push_back(
        lm_head(arch, arch.tie_word_embeddings ? std::optional<std::size_t>(0) : std::nullopt, "embed_out"));
    validate_model(model, origin);
    return model;
  }
  if (gpt2) {
    model.layers.push_back(embedding_layer("transformer.wte", arch.vocab_size, arch.hidden_size, 0.0, false));
    model.layers.push_back(
        embedding_layer("transformer.wpe", arch.max_position_embeddings, arch.hidden_size, arch.dropout, true));
  } else {  // StarCoder2's embedding_dropout (arch.dropout: its one rate) after the lookup
    model.layers.push_back(
        embedding_layer(block_names(arch).embedding, arch.vocab_size, arch.hidden_size, arch.dropout, false));
  }
  for (std::int64_t index = 0; index < arch.num_layers; ++index) {
    model.layers.push_back(gpt2 ? gpt2_block(arch, index) : llama_block(arch, index));
    if (arch.mla) replace_attention_with_mla(arch, model.layers.back());
    if (arch.moe && arch.moe->is_sparse_layer(index)) replace_mlp_with_moe(arch, model.layers.back());
  }
  const BlockNames names = block_names(arch);
  model.layers.push_back(final_norm(gpt2 ? "transformer.ln_f" : names.final_norm, arch.hidden_size,
                                    gpt2 || arch.layer_norm, gpt2 || (arch.layer_norm && arch.layer_norm_bias)));
  model.layers.push_back(
      lm_head(arch, arch.tie_word_embeddings ? std::optional<std::size_t>(0) : std::nullopt, names.head));
  validate_model(model, origin);
  return model;
}

}  // namespace shardplan
