// Host-callable launch functions of the GPU executor's CUDA kernels: the CPU runtime's layer math, on the device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace shardplan::gpu::kernels {

// Note [Kernel conventions]: every function here enqueues its kernel(s) on `stream` and returns without waiting;
// pointers are device pointers, sizes count elements. Each mirrors a function of the CPU runtime (executor/runtime/)
// with the same layouts — activations [tokens × features] row-major, tokens being micro_batch sequences back to
// back — and the same formulas, so the two agree to fp32 rounding; the comments name the CPU counterpart. Sizes are
// checked before launching (InternalError with rank and file:line); a count of zero launches nothing. Row reductions
// accumulate in double (Note [Deterministic reductions] in row_reductions.h) in a fixed tree (Note [Block
// reduction]), so results are the same on every run; the one exception is embedding_backward's atomicAdd.
// Parameter gradients are ADDED into their buffers, as the CPU kernels do; activation gradients are written.

// ---- cast.cu: fp32 ↔ bf16 (round-to-nearest-even; bf16 → fp32 is exact).
void cast_fp32_to_bf16(cudaStream_t stream, const float* in, __nv_bfloat16* out, std::int64_t count);
void cast_bf16_to_fp32(cudaStream_t stream, const __nv_bfloat16* in, float* out, std::int64_t count);

// ---- embedding.cu (CPU: embedding_layer.cpp). table is [vocab × width].
// out[t] = table[tokens[t]]. A token outside [0, vocab) yields a row of NaN (the CPU throws InputError; a kernel
// cannot, so the bad id poisons the loss instead of reading out of bounds).
void embedding_forward(cudaStream_t stream, const std::int32_t* tokens, const float* table, std::int64_t token_count,
                       std::int64_t vocab, std::int64_t width, float* out);
// grad_table[tokens[t]] += d_out[t] for every t (out-of-range tokens skipped). atomicAdd: a token repeated in the
// batch sums its rows in an unspecified order, so that gradient row may differ in the last bits from run to run.
void embedding_backward(cudaStream_t stream, const std::int32_t* tokens, const float* d_out, std::int64_t token_count,
                        std::int64_t vocab, std::int64_t width, float* grad_table);

// ---- rmsnorm.cu (CPU: rmsnorm.h). x, y, dy, dx are [rows × width]; weight, grad_weight [width]; inv_rms [rows].
// y = weight ⊙ x · r with r = 1/sqrt(mean(x²) + eps); writes y and r per row.
void rmsnorm_forward(cudaStream_t stream, const float* x, const float* weight, std::int64_t rows, std::int64_t width,
                     double eps, float* y, float* inv_rms);
// With x̂ = x·r and g = dy ⊙ weight: dx = r·(g − x̂·mean(g ⊙ x̂)) — added into dx when accumulate_dx (as the CPU
// rmsnorm_backward always does: the norm sits on a residual branch), written otherwise — and
// grad_weight += Σ_rows dy ⊙ x̂.
void rmsnorm_backward(cudaStream_t stream, const float* x, const float* inv_rms, const float* weight, const float* dy,
                      std::int64_t rows, std::int64_t width, float* dx, bool accumulate_dx, float* grad_weight);

// ---- rope.cu (CPU: rope.h). The rotate-half convention of HF Llama: pair (x[i], x[i + head_dim/2]) of every head
// turns by angle(p, i) = p · theta^(−2i/head_dim), token t at position p = t mod seq_len.
// Fills cos and sin, each [seq_len × head_dim/2] (as RopeTable), computed in double and rounded once.
void rope_table(cudaStream_t stream, std::int64_t seq_len, std::int64_t head_dim, double theta, float* cos,
                float* sin);
// Rotates x [tokens × heads·head_dim] in place: q with heads = num_heads, k with heads = num_kv_heads.
void rope_forward(cudaStream_t stream, const float* cos, const float* sin, std::int64_t seq_len, float* x,
                  std::int64_t tokens, std::int64_t heads, std::int64_t head_dim);
// The inverse rotation (by −angle), which is the rotation's transpose and so its backward: dx ← Rᵀ·dy in place.
void rope_backward(cudaStream_t stream, const float* cos, const float* sin, std::int64_t seq_len, float* x,
                   std::int64_t tokens, std::int64_t heads, std::int64_t head_dim);

// ---- attention.cu (CPU: attention.cpp, without the q/k/v/o projections, which are GEMMs).
struct AttentionDims {
  std::int64_t micro_batch = 0;
  std::int64_t seq_len = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;  // divides num_heads; query head h reads kv head h / (num_heads / num_kv_heads)
  std::int64_t head_dim = 0;
  std::int64_t tokens() const { return micro_batch * seq_len; }
  std::int64_t q_width() const { return num_heads * head_dim; }
  std::int64_t kv_width() const { return num_kv_heads * head_dim; }
  std::int64_t probs_count() const { return micro_batch * num_heads * seq_len * seq_len; }
};
// q [tokens × q_width] and k [tokens × kv_width] after RoPE, v [tokens × kv_width]. Writes
// probs [micro_batch × num_heads × seq_len × seq_len] = softmax(mask(q·kᵀ/√head_dim)) (zero above the diagonal)
// and context [tokens × q_width] = probs · v per head (the o_proj input, CPU "attn.context").
void attention_forward(cudaStream_t stream, const AttentionDims& dims, const float* q, const float* k, const float* v,
                       float* probs, float* context);
// Given d_context: writes dq [tokens × q_width], dk and dv [tokens × kv_width] (each kv head summing over the query
// heads of its group), still in the rotated frame: apply rope_backward to dq and dk next. `d_scores` is scratch of
// probs_count() floats, not aliasing probs (overwritten with dL/d(q·kᵀ)).
void attention_backward(cudaStream_t stream, const AttentionDims& dims, const float* q, const float* k, const float* v,
                        const float* probs, const float* d_context, float* d_scores, float* dq, float* dk,
                        float* dv);

// ---- swiglu.cu (CPU: mlp.cpp, between its projections). gate, up, act and their gradients are [count].
// act = silu(gate) ⊙ up with silu(g) = g·σ(g).
void swiglu_forward(cudaStream_t stream, const float* gate, const float* up, std::int64_t count, float* act);
// d_up = d_act·silu(g); d_gate = d_act·up·σ(g)·(1 + g·(1 − σ(g))). Written.
void swiglu_backward(cudaStream_t stream, const float* gate, const float* up, const float* d_act, std::int64_t count,
                     float* d_gate, float* d_up);

// ---- cross_entropy.cu (CPU: lm_head_loss.cpp, after its GEMM). logits, probs, d_logits are [rows × vocab].
// probs = softmax(logits) per row (probs may equal logits: in place), token_loss[t] = logsumexp(z_t) − z_t[y_t]
// [rows], and mean_loss (one float on the device) = Σ_t token_loss / rows, summed in a fixed order. A target outside
// [0, vocab) gives a NaN token loss (the CPU throws InputError).
void cross_entropy_forward(cudaStream_t stream, const float* logits, const std::int32_t* targets, std::int64_t rows,
                           std::int64_t vocab, float* probs, float* token_loss, float* mean_loss);
// d_logits = (probs − onehot(targets)) · (grad_loss / rows), grad_loss being dL/d(mean loss) (1, or 1/k when k
// micro-batches are accumulated). d_logits may equal probs.
void cross_entropy_backward(cudaStream_t stream, const float* probs, const std::int32_t* targets, std::int64_t rows,
                            std::int64_t vocab, float grad_loss, float* d_logits);

// ---- adamw.cu (CPU: adamw.h, same defaults and formula).
struct AdamWOptions {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};
// One step (step counts from 1) on fp32 master weights, m (exp_avg) and v (exp_avg_sq), all [count], as
// torch.optim.AdamW: p ← p·(1 − lr·λ); m ← β₁m + (1−β₁)g; v ← β₂v + (1−β₂)g²;
// p ← p − (lr / (1−β₁ᵗ)) · m / (√v / √(1−β₂ᵗ) + ε). When params_bf16 is not null, also writes the updated weights
// rounded to bf16 there (the copy the next forward gathers).
void adamw_step(cudaStream_t stream, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                std::int64_t count, std::int64_t step, const AdamWOptions& options, __nv_bfloat16* params_bf16);

}  // namespace shardplan::gpu::kernels
