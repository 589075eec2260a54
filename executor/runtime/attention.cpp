// Causal grouped-query self-attention with RoPE: projections, per-head softmax(QKᵀ/√d)·V, and their backward.
#include "attention.h"

#include <cmath>

#include "aligned_products.h"
#include "projection.h"
#include "ring_attention.h"
#include "rope.h"
#include "row_reductions.h"

namespace shardplan::runtime {
namespace {

// The views of one (sequence, head) pair inside the [tokens × heads·head_dim] q and [tokens × kv_dim] k, v buffers.
struct HeadSlices {
  std::int64_t q_offset, kv_offset, probs_offset;
};
HeadSlices head_slices(const DecoderDims& dims, const AttentionShape& shape, int b, std::int64_t head) {
  const std::int64_t s = shape.seq_len, group = dims.num_heads / dims.num_kv_heads;
  return {b * s * dims.q_dim() + head * dims.head_dim, b * s * dims.kv_dim() + (head / group) * dims.head_dim,
          (b * dims.num_heads + head) * s * s};
}

// P = softmax(mask(Q·Kᵀ/√d)) for every (sequence, head): row i keeps columns j ≤ i (causal), the rest are 0.
std::vector<float> attention_probs(const DecoderDims& dims, const AttentionShape& shape, const float* q,
                                   const float* k) {
  const std::int64_t s = shape.seq_len, d = dims.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> probs(static_cast<std::size_t>(shape.micro_batch * dims.num_heads * s * s));
  for (int b = 0; b < shape.micro_batch; ++b) {
    for (std::int64_t head = 0; head < dims.num_heads; ++head) {
      const HeadSlices at = head_slices(dims, shape, b, head);
      ConstStridedView Q(q + at.q_offset, s, d, Eigen::OuterStride<>(dims.q_dim()));
      ConstStridedView K(k + at.kv_offset, s, d, Eigen::OuterStride<>(dims.kv_dim()));
      MatrixView P(probs.data() + at.probs_offset, s, s);
      assign_product(P, Q * K.transpose());  // Note [Aligned products]
      for (std::int64_t i = 0; i < s; ++i) {
        auto visible = P.row(i).head(i + 1).array();
        const float row_max = visible.maxCoeff();  // stable softmax: exp of non-positive numbers only
        // Fixed-order exp and sum (Note [Deterministic reductions]).
        visible /= static_cast<float>(exp_shifted_sum(P.row(i).data(), i + 1, row_max, scale));
        P.row(i).tail(s - i - 1).setZero();
      }
    }
  }
  return probs;
}

// The attention core's backward on the whole sequence from the kept (or rebuilt) probabilities: d_context →
// dq (overwritten), dk and dv (added into zeros).
void core_backward(const DecoderDims& dims, const AttentionShape& shape, const SavedActivations& saved,
                   const float* d_context, float* dq, float* dk, float* dv) {
  const std::int64_t qd = dims.q_dim(), kv = dims.kv_dim(), d = dims.head_dim, s = shape.seq_len;
  const std::vector<float>& q = saved.get("attn.q");
  const std::vector<float>& k = saved.get("attn.k");
  const std::vector<float>& v = saved.get("attn.v");
  // Selective checkpointing: the same function as forward rebuilds P, so its bits equal the kept ones.
  std::vector<float> rebuilt;
  if (!saved.has("attn.probs")) rebuilt = attention_probs(dims, shape, q.data(), k.data());
  const std::vector<float>& probs = saved.has("attn.probs") ? saved.get("attn.probs") : rebuilt;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  RowMatrix dP(s, s);
  Eigen::VectorXf p_dot_dp(s);
  for (int b = 0; b < shape.micro_batch; ++b) {
    for (std::int64_t head = 0; head < dims.num_heads; ++head) {
      const HeadSlices at = head_slices(dims, shape, b, head);
      ConstStridedView Q(q.data() + at.q_offset, s, d, Eigen::OuterStride<>(qd));
      ConstStridedView K(k.data() + at.kv_offset, s, d, Eigen::OuterStride<>(kv));
      ConstStridedView V(v.data() + at.kv_offset, s, d, Eigen::OuterStride<>(kv));
      ConstStridedView dO(d_context + at.q_offset, s, d, Eigen::OuterStride<>(qd));
      ConstMatrixView P(probs.data() + at.probs_offset, s, s);
      // O = P·V: dV += Pᵀ·dO (kv heads shared by a group sum their query heads' terms), dP = dO·Vᵀ.
      add_product(StridedView(dv + at.kv_offset, s, d, Eigen::OuterStride<>(kv)), P.transpose() * dO);
      dP.noalias() = dO * V.transpose();  // dP is an Eigen-owned, aligned matrix already
      // Softmax backward per row: dS = P ⊙ (dP − Σ_j P·dP); masked entries have P = 0 and stay 0.
      for (std::int64_t i = 0; i < s; ++i) {
        p_dot_dp[i] = static_cast<float>(row_dot(P.row(i).data(), dP.row(i).data(), s));
      }
      dP = (P.array() * (dP.array().colwise() - p_dot_dp.array())) * scale;
      // S = Q·Kᵀ·scale: dQ = dS·K, dK += dSᵀ·Q.
      assign_product(StridedView(dq + at.q_offset, s, d, Eigen::OuterStride<>(qd)), dP * K);
      add_product(StridedView(dk + at.kv_offset, s, d, Eigen::OuterStride<>(kv)), dP.transpose() * Q);
    }
  }
}

// RoPE on this rank's tokens: positions 0.. of each sequence, or a CP rank's load-balanced ones (Note
// [Load-balanced positions]) in a table of the whole sequence.
void rotate_positions(const DecoderDims& dims, const AttentionShape& shape, const ContextParallelGroup* ring,
                      float* x, std::int64_t heads, bool inverse) {
  if (!ring) {
    rope_rotate(rope_table(shape.seq_len, dims.head_dim, dims.rope_theta), x, shape.tokens(), heads, dims.head_dim,
                inverse);
    return;
  }
  const std::int64_t whole = std::int64_t{shape.seq_len} * ring->degree();
  rope_rotate_at(rope_table(whole, dims.head_dim, dims.rope_theta), x, shape.tokens(),
                 load_balanced_positions(whole, ring->degree(), ring->rank()), heads, dims.head_dim, inverse);
}

}  // namespace

void attention_forward(const DecoderDims& dims, const LayerParams& params, const AttentionShape& shape,
                       const float* normed, bool keep_probs, SavedActivations& saved, float* out,
                       const ProgressPoll& progress, ContextParallelGroup* ring) {
  const std::int64_t t = shape.tokens(), h = dims.hidden_size, qd = dims.q_dim(), kv = dims.kv_dim();
  const std::int64_t d = dims.head_dim, s = shape.seq_len;
  std::vector<float>& q = saved.put("attn.q", std::vector<float>(static_cast<std::size_t>(t * qd)));
  std::vector<float>& k = saved.put("attn.k", std::vector<float>(static_cast<std::size_t>(t * kv)));
  std::vector<float>& v = saved.put("attn.v", std::vector<float>(static_cast<std::size_t>(t * kv)));
  // Note [LoRA projection]: each projection with its adapter, where the layer has one.
  projection_forward(dims, params, "self_attn.q_proj", {t, h, qd}, normed, saved, q.data());
  projection_forward(dims, params, "self_attn.k_proj", {t, h, kv}, normed, saved, k.data());
  projection_forward(dims, params, "self_attn.v_proj", {t, h, kv}, normed, saved, v.data());
  rotate_positions(dims, shape, ring, q.data(), dims.num_heads, false);
  rotate_positions(dims, shape, ring, k.data(), dims.num_kv_heads, false);
  poll(progress);

  std::vector<float>& context = saved.put("attn.context", std::vector<float>(static_cast<std::size_t>(t * qd)));
  if (ring) {
    std::vector<float>& lse = saved.put(
        "attn.lse", std::vector<float>(static_cast<std::size_t>(shape.micro_batch * dims.num_heads * s)));
    ring_attention_forward(dims, shape, *ring, q.data(), k.data(), v.data(), context.data(), lse.data(), progress);
    projection_forward(dims, params, "self_attn.o_proj", {t, qd, h}, context.data(), saved, out);
    return;
  }
  std::vector<float> probs = attention_probs(dims, shape, q.data(), k.data());
  for (int b = 0; b < shape.micro_batch; ++b) {
    for (std::int64_t head = 0; head < dims.num_heads; ++head) {
      const HeadSlices at = head_slices(dims, shape, b, head);
      ConstStridedView V(v.data() + at.kv_offset, s, d, Eigen::OuterStride<>(kv));
      StridedView O(context.data() + at.q_offset, s, d, Eigen::OuterStride<>(qd));
      assign_product(O, ConstMatrixView(probs.data() + at.probs_offset, s, s) * V);
    }
  }
  poll(progress);
  projection_forward(dims, params, "self_attn.o_proj", {t, qd, h}, context.data(), saved, out);
  if (keep_probs) saved.put("attn.probs", std::move(probs));
}

void attention_backward(const DecoderDims& dims, const LayerParams& params, const AttentionShape& shape,
                        const float* normed, const SavedActivations& saved, const float* d_out,
                        const LayerParams& grads, float* d_normed, const ProgressPoll& progress,
                        ContextParallelGroup* ring) {
  const std::int64_t t = shape.tokens(), h = dims.hidden_size, qd = dims.q_dim(), kv = dims.kv_dim();
  const std::vector<float>& q = saved.get("attn.q");
  const std::vector<float>& k = saved.get("attn.k");
  const std::vector<float>& v = saved.get("attn.v");
  std::vector<float> d_context(static_cast<std::size_t>(t * qd));
  projection_backward(dims, params, "self_attn.o_proj", {t, qd, h}, saved.get("attn.context").data(), saved, d_out,
                      d_context.data(), false, grads);
  poll(progress);

  std::vector<float> dq(static_cast<std::size_t>(t * qd)), dk(static_cast<std::size_t>(t * kv)),
      dv(static_cast<std::size_t>(t * kv));
  if (ring) {
    ring_attention_backward(dims, shape, *ring, q.data(), k.data(), v.data(), saved.get("attn.context").data(),
                            saved.get("attn.lse").data(), d_context.data(), dq.data(), dk.data(), dv.data(), progress);
  } else {
    core_backward(dims, shape, saved, d_context.data(), dq.data(), dk.data(), dv.data());
  }
  rotate_positions(dims, shape, ring, dq.data(), dims.num_heads, true);
  rotate_positions(dims, shape, ring, dk.data(), dims.num_kv_heads, true);
  poll(progress);
  projection_backward(dims, params, "self_attn.q_proj", {t, h, qd}, normed, saved, dq.data(), d_normed, false, grads);
  projection_backward(dims, params, "self_attn.k_proj", {t, h, kv}, normed, saved, dk.data(), d_normed, true, grads);
  projection_backward(dims, params, "self_attn.v_proj", {t, h, kv}, normed, saved, dv.data(), d_normed, true, grads);
}

}  // namespace shardplan::runtime
