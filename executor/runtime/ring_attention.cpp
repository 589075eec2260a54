// Ring attention over a CP group: load-balanced positions and the attention core's ring steps, forward and backward
// (Note [Ring attention core] in ring_attention.h).
#include "ring_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "aligned_products.h"
#include "errors.h"
#include "row_reductions.h"

namespace shardplan::runtime {

std::vector<std::int64_t> load_balanced_positions(std::int64_t seq_len, int degree, int rank) {
  if (degree < 1 || rank < 0 || rank >= degree || seq_len % (2 * std::int64_t{degree}) != 0) {
    throw InputError("context parallel: seq_len " + std::to_string(seq_len) + " is not a multiple of 2 x " +
                     std::to_string(degree) + " (torch's load-balanced sharding cuts 2·cp equal chunks)");
  }
  const std::int64_t chunk = seq_len / (2 * std::int64_t{degree});
  std::vector<std::int64_t> positions;
  for (const std::int64_t owned : {std::int64_t{rank}, 2 * std::int64_t{degree} - 1 - rank}) {
    for (std::int64_t i = 0; i < chunk; ++i) positions.push_back(owned * chunk + i);
  }
  return positions;
}

namespace {

// One rank's share of the ring: its sequences' shapes and every rank's token positions.
struct RingLayout {
  std::int64_t tokens, seq, heads, group, head_dim, q_dim, kv_dim;
  std::vector<std::vector<std::int64_t>> positions;  // per CP rank
  float scale;

  RingLayout(const DecoderDims& dims, const AttentionShape& shape, const ContextParallelGroup& ring)
      : tokens(shape.tokens()), seq(shape.seq_len), heads(dims.num_heads), group(dims.num_heads / dims.num_kv_heads),
        head_dim(dims.head_dim), q_dim(dims.q_dim()), kv_dim(dims.kv_dim()),
        scale(1.0f / std::sqrt(static_cast<float>(dims.head_dim))) {
    for (int r = 0; r < ring.degree(); ++r) {
      positions.push_back(load_balanced_positions(shape.seq_len * ring.degree(), ring.degree(), r));
    }
  }
  std::int64_t kv_elements() const { return tokens * kv_dim; }
  // Views of sequence b, query head `head` (and its kv head) in the [tokens × width] buffers.
  ConstStridedView q_of(const float* q, std::int64_t b, std::int64_t head) const {
    return ConstStridedView(q + q_offset(b, head), seq, head_dim, Eigen::OuterStride<>(q_dim));
  }
  std::int64_t q_offset(std::int64_t b, std::int64_t head) const { return b * seq * q_dim + head * head_dim; }
  std::int64_t kv_offset(std::int64_t b, std::int64_t head) const {
    return b * seq * kv_dim + (head / group) * head_dim;
  }
  std::int64_t lse_offset(std::int64_t b, std::int64_t head) const { return (b * heads + head) * seq; }
};

// Scores of one step for sequence b and head `head`: S = Q·K_srcᵀ; `visible` below is the causal mask on the whole
// sequence (a query sees the keys at its position and before).
void step_scores(const RingLayout& at, const float* q, const float* k_src, std::int64_t b, std::int64_t head,
                 RowMatrix& scores) {
  const ConstStridedView Q = at.q_of(q, b, head);
  const ConstStridedView K(k_src + at.kv_offset(b, head), at.seq, at.head_dim, Eigen::OuterStride<>(at.kv_dim));
  scores.noalias() = Q * K.transpose();  // an Eigen-owned, aligned matrix (Note [Aligned products])
}

bool visible(std::int64_t query_position, std::int64_t key_position) { return key_position <= query_position; }

// One forward ring step: the local queries against the held K/V of rank `src`, merged into context and lse.
void forward_step(const RingLayout& at, int step, const float* q, const float* kv, int src, int rank, float* context,
                  float* lse) {
  const float* k_src = kv;
  const float* v_src = kv + at.kv_elements();
  const auto& q_pos = at.positions[static_cast<std::size_t>(rank)];
  const auto& k_pos = at.positions[static_cast<std::size_t>(src)];
  RowMatrix scores(at.seq, at.seq);
  RowMatrix step_out(at.seq, at.head_dim);
  for (std::int64_t b = 0; b * at.seq < at.tokens; ++b) {
    for (std::int64_t head = 0; head < at.heads; ++head) {
      step_scores(at, q, k_src, b, head, scores);
      std::vector<double> step_lse(static_cast<std::size_t>(at.seq), -INFINITY);
      for (std::int64_t i = 0; i < at.seq; ++i) {
        float row_max = -INFINITY;
        for (std::int64_t j = 0; j < at.seq; ++j) {
          if (visible(q_pos[i], k_pos[j])) row_max = std::max(row_max, scores(i, j));
        }
        if (row_max == -INFINITY) {  // no key of this step is visible: the row takes no part (torch's partial)
          scores.row(i).setZero();
          continue;
        }
        double sum = 0;
        for (std::int64_t j = 0; j < at.seq; ++j) {
          scores(i, j) = visible(q_pos[i], k_pos[j]) ? std::exp((scores(i, j) - row_max) * at.scale) : 0.0f;
          sum += static_cast<double>(scores(i, j));
        }
        scores.row(i) /= static_cast<float>(sum);
        step_lse[static_cast<std::size_t>(i)] = static_cast<double>(row_max) * at.scale + std::log(sum);
      }
      const ConstStridedView V(v_src + at.kv_offset(b, head), at.seq, at.head_dim, Eigen::OuterStride<>(at.kv_dim));
      step_out.noalias() = scores * V;
      StridedView out(context + at.q_offset(b, head), at.seq, at.head_dim, Eigen::OuterStride<>(at.q_dim));
      float* row_lse = lse + at.lse_offset(b, head);
      for (std::int64_t i = 0; i < at.seq; ++i) {
        const double block_lse = step_lse[static_cast<std::size_t>(i)];
        if (block_lse == -INFINITY) continue;
        if (step == 0) {  // the diagonal step: every query sees at least itself
          out.row(i) = step_out.row(i);
          row_lse[i] = static_cast<float>(block_lse);
          continue;
        }
        // _SDPAMerger._merge_one (ring-flash-attention's stable form): out − σ(lse_b − lse)·(out − out_b), and
        // lse − logσ(lse − lse_b) = log(e^lse + e^lse_b).
        const double old_lse = row_lse[i];
        const auto weight = static_cast<float>(1.0 / (1.0 + std::exp(old_lse - block_lse)));
        out.row(i) -= weight * (out.row(i) - step_out.row(i));
        const double high = std::max(old_lse, block_lse);
        row_lse[i] = static_cast<float>(high + std::log(std::exp(old_lse - high) + std::exp(block_lse - high)));
      }
    }
  }
}

// One backward ring step (FlashAttention-2's backward per block, Dao 2023 Alg. 2): P = exp(S·scale − lse) on the
// visible entries, dV_src += Pᵀ·dO, dS = P ⊙ (dO·V_srcᵀ − D)·scale with D = rowsum(dO ⊙ O), dQ += dS·K_src,
// dK_src += dSᵀ·Q. `grad_kv` is [dk | dv] of the held keys, overwritten.
void backward_step(const RingLayout& at, const float* q, const float* kv, int src, int rank, const float* lse,
                   const float* d_context, const std::vector<float>& row_delta, float* dq, float* grad_kv) {
  const float* k_src = kv;
  const float* v_src = kv + at.kv_elements();
  float* dk_src = grad_kv;
  float* dv_src = grad_kv + at.kv_elements();
  std::fill(grad_kv, grad_kv + 2 * at.kv_elements(), 0.0f);
  const auto& q_pos = at.positions[static_cast<std::size_t>(rank)];
  const auto& k_pos = at.positions[static_cast<std::size_t>(src)];
  RowMatrix probs(at.seq, at.seq), d_scores(at.seq, at.seq);
  for (std::int64_t b = 0; b * at.seq < at.tokens; ++b) {
    for (std::int64_t head = 0; head < at.heads; ++head) {
      step_scores(at, q, k_src, b, head, probs);
      const float* row_lse = lse + at.lse_offset(b, head);
      const float* delta = row_delta.data() + at.lse_offset(b, head);
      for (std::int64_t i = 0; i < at.seq; ++i) {
        for (std::int64_t j = 0; j < at.seq; ++j) {
          probs(i, j) = visible(q_pos[i], k_pos[j]) ? std::exp(probs(i, j) * at.scale - row_lse[i]) : 0.0f;
        }
      }
      const ConstStridedView Q = at.q_of(q, b, head);
      const ConstStridedView K(k_src + at.kv_offset(b, head), at.seq, at.head_dim, Eigen::OuterStride<>(at.kv_dim));
      const ConstStridedView V(v_src + at.kv_offset(b, head), at.seq, at.head_dim, Eigen::OuterStride<>(at.kv_dim));
      const ConstStridedView dO(d_context + at.q_offset(b, head), at.seq, at.head_dim, Eigen::OuterStride<>(at.q_dim));
      add_product(StridedView(dv_src + at.kv_offset(b, head), at.seq, at.head_dim, Eigen::OuterStride<>(at.kv_dim)),
                  probs.transpose() * dO);
      d_scores.noalias() = dO * V.transpose();
      for (std::int64_t i = 0; i < at.seq; ++i) d_scores.row(i).array() -= delta[i];
      d_scores = (probs.array() * d_scores.array()) * at.scale;
      add_product(StridedView(dq + at.q_offset(b, head), at.seq, at.head_dim, Eigen::OuterStride<>(at.q_dim)),
                  d_scores * K);
      add_product(StridedView(dk_src + at.kv_offset(b, head), at.seq, at.head_dim, Eigen::OuterStride<>(at.kv_dim)),
                  d_scores.transpose() * Q);
    }
  }
}

// The rank whose K/V a rank holds at ring step i.
int source_rank(const ContextParallelGroup& ring, int step) {
  return ((ring.rank() - step) % ring.degree() + ring.degree()) % ring.degree();
}

std::vector<float> concatenated(const float* a, const float* b, std::int64_t count) {
  std::vector<float> both(a, a + count);
  both.insert(both.end(), b, b + count);
  return both;
}

// Note [Repeated K/V] (ring_attention.h): the block's K or V [tokens × kv_dim] copied up to every query head
// [tokens × q_dim] (repeat_kv: query head h reads kv head h / group), and the way back for their gradients, summed
// over each kv head's copies (repeat_kv's backward).
DecoderDims every_head(const DecoderDims& dims) {
  DecoderDims repeated = dims;
  repeated.num_kv_heads = dims.num_heads;
  return repeated;
}
std::vector<float> repeat_heads(const DecoderDims& dims, std::int64_t tokens, const float* x) {
  const std::int64_t group = dims.num_heads / dims.num_kv_heads, d = dims.head_dim;
  std::vector<float> out(static_cast<std::size_t>(tokens * dims.q_dim()));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t head = 0; head < dims.num_heads; ++head) {
      std::copy_n(x + t * dims.kv_dim() + (head / group) * d, d, out.begin() + t * dims.q_dim() + head * d);
    }
  }
  return out;
}
void sum_repeats(const DecoderDims& dims, std::int64_t tokens, const float* repeated, float* out) {
  const std::int64_t group = dims.num_heads / dims.num_kv_heads, d = dims.head_dim;
  std::fill(out, out + tokens * dims.kv_dim(), 0.0f);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t head = 0; head < dims.num_heads; ++head) {
      const float* from = repeated + t * dims.q_dim() + head * d;
      float* to = out + t * dims.kv_dim() + (head / group) * d;
      for (std::int64_t j = 0; j < d; ++j) to[j] += from[j];
    }
  }
}

}  // namespace

void ring_attention_forward(const DecoderDims& dims, const AttentionShape& shape, ContextParallelGroup& ring,
                            const float* q, const float* k, const float* v, float* context, float* lse,
                            const ProgressPoll& progress) {
  if (dims.num_kv_heads < dims.num_heads) {  // Note [Repeated K/V]
    const std::vector<float> k_every = repeat_heads(dims, shape.tokens(), k),
                             v_every = repeat_heads(dims, shape.tokens(), v);
    ring_attention_forward(every_head(dims), shape, ring, q, k_every.data(), v_every.data(), context, lse, progress);
    return;
  }
  const RingLayout at(dims, shape, ring);
  std::vector<float> held = concatenated(k, v, at.kv_elements()), next(held.size());
  int pending = -1;
  for (int step = 0; step < ring.degree(); ++step) {
    if (step > 0) {
      ring.wait_ring_step(pending);
      held.swap(next);
    }
    if (step + 1 < ring.degree()) pending = ring.start_ring_step(held, next, ContextParallelGroup::Channel::kv);
    forward_step(at, step, q, held.data(), source_rank(ring, step), ring.rank(), context, lse);
    poll(progress);
  }
}

void ring_attention_backward(const DecoderDims& dims, const AttentionShape& shape, ContextParallelGroup& ring,
                             const float* q, const float* k, const float* v, const float* context, const float* lse,
                             const float* d_context, float* dq, float* dk, float* dv, const ProgressPoll& progress) {
  if (dims.num_kv_heads < dims.num_heads) {  // Note [Repeated K/V]
    const std::int64_t tokens = shape.tokens();
    const std::vector<float> k_every = repeat_heads(dims, tokens, k), v_every = repeat_heads(dims, tokens, v);
    std::vector<float> dk_every(k_every.size()), dv_every(v_every.size());
    ring_attention_backward(every_head(dims), shape, ring, q, k_every.data(), v_every.data(), context, lse, d_context,
                            dq, dk_every.data(), dv_every.data(), progress);
    sum_repeats(dims, tokens, dk_every.data(), dk);
    sum_repeats(dims, tokens, dv_every.data(), dv);
    return;
  }
  const RingLayout at(dims, shape, ring);
  // D_i = dO_i · O_i per (sequence, head, query): the softmax backward's row term, once for every step.
  std::vector<float> row_delta(static_cast<std::size_t>(shape.micro_batch * at.heads * at.seq));
  for (std::int64_t b = 0; b < shape.micro_batch; ++b) {
    for (std::int64_t head = 0; head < at.heads; ++head) {
      for (std::int64_t i = 0; i < at.seq; ++i) {
        const std::int64_t row = at.q_offset(b, head) + i * at.q_dim;
        row_delta[static_cast<std::size_t>(at.lse_offset(b, head) + i)] =
            static_cast<float>(row_dot(d_context + row, context + row, at.head_dim));
      }
    }
  }
  std::fill(dq, dq + at.tokens * at.q_dim, 0.0f);
  std::vector<float> held = concatenated(k, v, at.kv_elements()), next(held.size());
  std::vector<float> step_grad(held.size()), sending(held.size()), received(held.size());
  int pending_kv = -1, pending_grad = -1;
  for (int step = 0; step < ring.degree(); ++step) {
    if (step > 0) {
      ring.wait_ring_step(pending_kv);
      held.swap(next);
    }
    if (step + 1 < ring.degree()) pending_kv = ring.start_ring_step(held, next, ContextParallelGroup::Channel::kv);
    backward_step(at, q, held.data(), source_rank(ring, step), ring.rank(), lse, d_context, row_delta, dq,
                  step_grad.data());
    // The held keys' dK/dV so far (the ranks before added theirs), plus this step's, go on to the next rank.
    if (step > 0) {
      ring.wait_ring_step(pending_grad);
      for (std::size_t i = 0; i < sending.size(); ++i) sending[i] = received[i] + step_grad[i];
    } else {
      sending = step_grad;
    }
    pending_grad = ring.start_ring_step(sending, received, ContextParallelGroup::Channel::grad_kv);
    poll(progress);
  }
  ring.wait_ring_step(pending_grad);  // the last exchange brings this rank its own keys' gradients
  std::copy_n(received.begin(), at.kv_elements(), dk);
  std::copy_n(received.begin() + at.kv_elements(), at.kv_elements(), dv);
}

}  // namespace shardplan::runtime
