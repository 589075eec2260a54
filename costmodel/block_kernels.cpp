// Kernel specs of the decoder builder's layers, counted from the reference implementations' forward code.
#include "block_kernels.h"

#include "block_naming.h"

namespace shardplan {
namespace {

// Note [Elementwise traffic]: a memory-bound kernel reads its inputs and writes its output once (elements per token
// below count both). Its backward reads the saved input(s) and the output gradient and writes the input gradient(s):
// about twice the forward traffic in twice the kernels for unary and binary ops (an add's backward passes the
// gradient through; where the residual branches meet, one add sums the two gradients). Reductions over a row
// (norm statistics) write one value per row, not counted.
ElementwiseSpec op(std::string name, double act, double fp32, int kernels) {
  return elementwise_kernel(std::move(name), act, fp32, kernels);
}

// HF LlamaRMSNorm.forward (transformers/models/llama/modeling_llama.py): hidden.to(float32) [read h, write h fp32];
// variance = hidden.pow(2).mean(-1) [read h fp32, write h fp32; read h fp32]; + eps, rsqrt [one value per row];
// hidden * rsqrt [read h fp32, write h fp32]; .to(bf16) [read h fp32, write h]; weight * hidden [read h, write h].
// torch's own rms_norm (aten/src/ATen/native/layer_norm.cpp, what nn.RMSNorm runs in eager) is the same sequence.
ElementwiseSpec rms_norm(std::int64_t hidden) {
  const auto h = static_cast<double>(hidden);
  return op("rmsnorm", 4.0 * h, 7.0 * h, 8);
}

// torch.nn.functional.layer_norm: one fused kernel reads h and writes h (and a mean and rstd per row); backward is
// two kernels (the input gradient reading x and dy, then the weight and bias gradients reading them again).
ElementwiseSpec layer_norm(std::int64_t hidden) {
  const auto h = static_cast<double>(hidden);
  ElementwiseSpec spec;
  spec.name = "layernorm";
  spec.forward = {2.0 * h, 0.0, 0.0, 1};
  spec.backward = {5.0 * h, 0.0, 0.0, 2};
  return spec;
}

// x + branch(x): read 2 inputs, write 1; backward, one add where the two gradients meet.
ElementwiseSpec residual_add(std::int64_t hidden) {
  const auto h = static_cast<double>(hidden);
  ElementwiseSpec spec;
  spec.name = "residual add";
  spec.forward = {3.0 * h, 0.0, 0.0, 1};
  spec.backward = {3.0 * h, 0.0, 0.0, 1};
  return spec;
}

// Dropout at rate p > 0: read h, write h and a one-byte mask (Korthikanti et al. 2022 §4.2); backward reads the mask
// and the gradient, writes the gradient.
ElementwiseSpec dropout(std::int64_t width) {
  const auto w = static_cast<double>(width);
  ElementwiseSpec spec;
  spec.name = "dropout";
  spec.forward = {2.0 * w, 0.0, w, 1};
  spec.backward = {2.0 * w, 0.0, w, 1};
  return spec;
}

}  // namespace

// HF LlamaDecoderLayer (transformers/models/llama/modeling_llama.py, SDPA attention) in eager PyTorch:
// RMSNorm; q/k/v projections; RoPE on q and k (apply_rotary_pos_emb: q·cos [read w, write w], rotate_half's -x2 [w/2,
// w/2] and cat [w, w], ·sin [w, w], + [2w, w]: 10w elements in 5 kernels for a tensor of width w); repeat_kv copies K
// and V up to every query head when heads share them (grouped-query attention: read 2·kv, write 2·h); SDPA (flash);
// transpose(1, 2).contiguous() of its output [h, h]; o_proj; residual add; RMSNorm; gate and up projections;
// act_fn(gate) * up [SiLU: f, f; mul: 2f, f]; down projection; residual add.
LayerKernelSpec llama_block_kernels(const DecoderArchitecture& arch) {
  const std::int64_t h = arch.hidden_size, q = arch.q_dim(), kv = arch.kv_dim(), f = arch.intermediate_size;
  const double qd = static_cast<double>(q), kvd = static_cast<double>(kv), fd = static_cast<double>(f);
  const BlockNames n = block_names(arch);  // Note [Block naming]
  LayerKernelSpec spec;
  // Forward matmul order q, k, v, o, gate, up, down (torchtitan's w1 = gate before w3 = up): the 1st, 3rd, 5th and
  // 7th are saved by the selective-op policy. Phi-3 fuses qkv_proj and gate_up_proj; Falcon and InternLM2 fuse q/k/v
  // only; StarCoder2's and Falcon's MLPs are up and down only.
  if (arch.fused_projections || arch.fused_qkv) {
    spec.projections.push_back({n.qkv, h, q + 2 * kv});
  } else {
    spec.projections.insert(spec.projections.end(), {{n.q, h, q}, {n.k, h, kv}, {n.v, h, kv}});
  }
  spec.projections.push_back({n.o, q, h});
  if (!arch.gated_mlp) {
    spec.projections.insert(spec.projections.end(), {{n.up, h, f}, {n.down, f, h}});
  } else if (arch.fused_projections) {
    spec.projections.insert(spec.projections.end(), {{n.gate_up, h, 2 * f}, {n.down, f, h}});
  } else {
    spec.projections.insert(spec.projections.end(), {{n.gate, h, f}, {n.up, h, f}, {n.down, f, h}});
  }
  for (std::size_t i = 0; i < spec.projections.size(); ++i) spec.projections[i].saved_by_op_policy = i % 2 == 0;
  spec.attention = AttentionSpec{arch.num_heads, arch.head_dim(), true};
  // Phi-3.5-MoE's, StarCoder2's, Falcon's and Cohere's nn.LayerNorm in place of each RMSNorm over the hidden width.
  const auto hidden_norm = [&arch](std::int64_t width) { return arch.layer_norm ? layer_norm(width) : rms_norm(width); };
  const bool has_dropout = arch.dropout > 0;  // StarCoder2's residual dropouts after o_proj and c_proj
  spec.elementwise.push_back(hidden_norm(h));
  // Falcon's new_decoder_architecture normalises the block input twice (ln_attn, ln_mlp); a parallel block with one
  // norm (Cohere, Falcon's parallel_attn) feeds its output to both branches.
  if (arch.parallel_residual && arch.parallel_norms == 2) spec.elementwise.push_back(hidden_norm(h));
  if (arch.qk_norm) {  // Qwen3Attention: q_norm(q) and k_norm(k) per head, as LlamaRMSNorm runs them
    ElementwiseSpec norms = arch.layer_norm ? layer_norm(q + kv) : rms_norm(q + kv);  // Cohere's are LayerNorms
    norms.name = "q/k norm";
    norms.forward.kernels *= 2;
    norms.backward.kernels *= 2;
    spec.elementwise.push_back(norms);
  }
  spec.elementwise.push_back(op("rotary", 10.0 * (qd + kvd), 0.0, 10));
  if (kv < q) spec.elementwise.push_back(op("repeat_kv", 2.0 * (qd + kvd), 0.0, 2));
  if (arch.attention_sinks) {
    // gpt-oss: each head's sink logit joins the softmax's denominator (one value per head per token, read in the
    // kernel); backward sums each head's sink gradient over the tokens, one fp32 per head per token. transformers'
    // eager_attention_forward (models/gpt_oss/modeling_gpt_oss.py) concatenates module.sinks, expanded to every query
    // row, to the scores, softmaxes, and drops that column: one more exp and add per row of s, under 1/s of the
    // attention core's FLOPs, so the attention FLOPs stay 4·s·q (test_hf_block_kernels.cpp).
    const double heads = static_cast<double>(arch.num_heads);
    ElementwiseSpec sinks;
    sinks.name = "attention sinks";
    sinks.forward = {0.0, heads, 0.0, 0};
    sinks.backward = {0.0, 2.0 * heads, 0.0, 1};
    spec.elementwise.push_back(sinks);
  }
  spec.elementwise.push_back(op("attention output transpose", 2.0 * qd, 0.0, 1));
  if (arch.sandwich_norms) spec.elementwise.push_back(rms_norm(h));  // Gemma: post_attention_layernorm on the branch
  if (has_dropout) spec.elementwise.push_back(dropout(h));
  spec.elementwise.push_back(residual_add(h));
  if (!arch.parallel_residual) spec.elementwise.push_back(hidden_norm(h));
  // Gemma's GeGLU (gelu_pytorch_tanh(gate) * up) moves what SiLU's does; its post_feedforward_layernorm one more norm.
  if (arch.sandwich_norms) spec.elementwise.push_back(rms_norm(h));
  if (arch.gated_mlp) {
    ElementwiseSpec swiglu;
    swiglu.name = "silu * up";
    swiglu.forward = {5.0 * fd, 0.0, 0.0, 2};
    // SiLU backward reads gate and the gradient, writes one (3f); mul backward, one product per input (6f).
    swiglu.backward = {9.0 * fd, 0.0, 0.0, 3};
    spec.elementwise.push_back(swiglu);
  } else {  // StarCoder2's gelu_pytorch_tanh, Falcon's gelu: one kernel, as gpt2_block_kernels counts it
    ElementwiseSpec gelu;
    gelu.name = "gelu";
    gelu.forward = {2.0 * fd, 0.0, 0.0, 1};
    gelu.backward = {3.0 * fd, 0.0, 0.0, 1};
    spec.elementwise.push_back(gelu);
  }
  if (has_dropout) spec.elementwise.push_back(dropout(h));
  ElementwiseSpec last_add = residual_add(h);
  last_add.recomputed_by_op_policy = false;
  spec.elementwise.push_back(last_add);
  return spec;
}

// HF GPT2Block / MPT's block (llm-foundry MPTBlock with a fused LayerNorm and GELU): LayerNorm; c_attn (fused q, k, v,
// bias added in the GEMM's epilogue: addmm); SDPA; merge heads (transpose + contiguous: h, h); c_proj; dropout;
// residual add; LayerNorm; c_fc; GELU (F.gelu, one kernel: f, f); c_proj; dropout; residual add. Biases' gradients
// are one reduction each over the output gradient (3h + h + f + h read).
LayerKernelSpec gpt2_block_kernels(const DecoderArchitecture& arch) {
  const std::int64_t h = arch.hidden_size, f = arch.intermediate_size;
  const double hd = static_cast<double>(h), fd = static_cast<double>(f);
  LayerKernelSpec spec;
  spec.projections = {{"attn.c_attn", h, 3 * h, true},
                      {"attn.c_proj", h, h, false},
                      {"mlp.c_fc", h, f, true},
                      {"mlp.c_proj", f, h, false}};
  spec.attention = AttentionSpec{arch.num_heads, arch.head_dim(), true};
  const bool has_dropout = arch.dropout > 0;
  spec.elementwise.push_back(layer_norm(h));
  spec.elementwise.push_back(op("merge heads", 2.0 * hd, 0.0, 1));
  if (has_dropout) spec.elementwise.push_back(dropout(h));
  spec.elementwise.push_back(residual_add(h));
  spec.elementwise.push_back(layer_norm(h));
  ElementwiseSpec gelu;
  gelu.name = "gelu";
  gelu.forward = {2.0 * fd, 0.0, 0.0, 1};
  gelu.backward = {3.0 * fd, 0.0, 0.0, 1};
  spec.elementwise.push_back(gelu);
  if (has_dropout) spec.elementwise.push_back(dropout(h));
  ElementwiseSpec last_add = residual_add(h);
  last_add.recomputed_by_op_policy = false;
  spec.elementwise.push_back(last_add);
  ElementwiseSpec bias_grads;
  bias_grads.name = "bias gradients";
  bias_grads.backward = {6.0 * hd + fd, 0.0, 0.0, 4};
  spec.elementwise.push_back(bias_grads);
  return spec;
}

// nn.Embedding: a gather (read h, write h per token); backward, embedding_dense_backward scatter-adds each token's
// gradient row into the weight gradient (read h, read and write the row: 3h) in a few kernels (sort, count, sum).
// GPT-2's position embedding then adds onto the token embedding (3h) and applies the embedding dropout.
LayerKernelSpec embedding_kernels(std::int64_t hidden, bool adds_to_input, double dropout_rate) {
  const auto h = static_cast<double>(hidden);
  LayerKernelSpec spec;
  spec.embedding_lookup = true;
  ElementwiseSpec gather;
  gather.name = "embedding";
  gather.forward = {2.0 * h, 0.0, 0.0, 1};
  gather.backward = {3.0 * h, 0.0, 0.0, 3};
  spec.elementwise.push_back(gather);
  if (adds_to_input) spec.elementwise.push_back(residual_add(hidden));
  if (dropout_rate > 0) spec.elementwise.push_back(dropout(hidden));
  return spec;
}

LayerKernelSpec final_norm_kernels(std::int64_t hidden, bool is_layer_norm) {
  LayerKernelSpec spec;
  spec.elementwise.push_back(is_layer_norm ? layer_norm(hidden) : rms_norm(hidden));
  return spec;
}

// logits = lm_head(x); loss = cross_entropy(logits.float(), targets) (HF ForCausalLMLoss, torchtitan's
// cross_entropy_loss): the upcast [read V, write V fp32], log_softmax [read V fp32, write V fp32], nll_loss [one value
// per row]. Backward: nll_loss's gradient [write V fp32], log_softmax's [read 2V fp32, write V fp32], the downcast
// [read V fp32, write V].
LayerKernelSpec lm_head_kernels(std::int64_t hidden, std::int64_t vocab) {
  const auto v = static_cast<double>(vocab);
  LayerKernelSpec spec;
  spec.projections = {{"lm_head", hidden, vocab, true}};
  ElementwiseSpec loss;
  loss.name = "cross-entropy (fp32)";
  loss.forward = {v, 3.0 * v, 0.0, 3};
  loss.backward = {v, 5.0 * v, 0.0, 3};
  spec.elementwise.push_back(loss);
  return spec;
}

double selective_op_kept_elements(const LayerKernelSpec& spec, std::int64_t hidden) {
  double kept = static_cast<double>(hidden);  // the block input (the checkpoint's own input)
  for (const ProjectionSpec& projection : spec.projections) {
    if (projection.saved_by_op_policy) kept += static_cast<double>(projection.out_features);
  }
  if (spec.attention) kept += static_cast<double>(spec.attention->heads * spec.attention->head_dim);
  return kept;
}

// Note [Elementwise traffic] above.
ElementwiseSpec elementwise_kernel(std::string name, double act, double fp32, int kernels) {
  ElementwiseSpec spec;
  spec.name = std::move(name);
  spec.forward = {act, fp32, 0.0, kernels};
  spec.backward = {2.0 * act, 2.0 * fp32, 0.0, 2 * kernels};
  return spec;
}

}  // namespace shardplan
