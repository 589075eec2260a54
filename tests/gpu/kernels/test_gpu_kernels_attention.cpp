// GPU kernel test, attention: causal grouped-query softmax(q·kᵀ/√d)·v and its backward against the CPU runtime.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention.h"
#include "device_kernels.h"
#include "kernel_test_support.h"
#include "saved_activations.h"

namespace shardplan::gpu::kernels::testing {
namespace {

// One attention shape: micro_batch sequences of seq_len tokens, hidden = micro_batch·seq_len (Note [Identity
// input]), kHeads query heads over kKvHeads kv heads of hidden / kHeads dimensions.
void check_attention(Stream& stream, int micro_batch, int seq_len) {
  runtime::DecoderDims dims = test_dims();
  const std::int64_t tokens = std::int64_t{micro_batch} * seq_len, hidden = tokens, head_dim = hidden / kHeads;
  dims.hidden_size = hidden;
  dims.head_dim = head_dim;
  dims.max_positions = seq_len;
  const std::int64_t kv = kKvHeads * head_dim;
  const std::string where = " (micro_batch " + std::to_string(micro_batch) + ", seq " + std::to_string(seq_len) + ")";
  const auto q_size = static_cast<std::size_t>(tokens * hidden), kv_size = static_cast<std::size_t>(tokens * kv);
  std::vector<float> w_q = uniform_buffer(q_size, 91, -1.0f, 1.0f);
  std::vector<float> w_k = uniform_buffer(kv_size, 92, -1.0f, 1.0f);
  std::vector<float> w_v = uniform_buffer(kv_size, 93, -1.0f, 1.0f);
  std::vector<float> w_o = identity(hidden);
  std::vector<float> g_q(q_size), g_k(kv_size), g_v(kv_size), g_o(q_size);
  const runtime::LayerParams params = bind({{"self_attn.q_proj.weight", {hidden, hidden}, &w_q},
                                            {"self_attn.k_proj.weight", {kv, hidden}, &w_k},
                                            {"self_attn.v_proj.weight", {kv, hidden}, &w_v},
                                            {"self_attn.o_proj.weight", {hidden, hidden}, &w_o}});
  const runtime::LayerParams grads = bind({{"self_attn.q_proj.weight", {hidden, hidden}, &g_q},
                                           {"self_attn.k_proj.weight", {kv, hidden}, &g_k},
                                           {"self_attn.v_proj.weight", {kv, hidden}, &g_v},
                                           {"self_attn.o_proj.weight", {hidden, hidden}, &g_o}});
  const std::vector<float> normed = identity(hidden);
  const runtime::AttentionShape shape{micro_batch, seq_len};
  runtime::SavedActivations saved;
  std::vector<float> out(q_size);
  runtime::attention_forward(dims, params, shape, normed.data(), true, saved, out.data());
  const std::vector<float> d_out = uniform_buffer(q_size, 94, -1.0f, 1.0f);
  std::vector<float> d_normed(q_size);
  runtime::attention_backward(dims, params, shape, normed.data(), saved, d_out.data(), grads, d_normed.data());

  const AttentionDims gpu_dims{micro_batch, seq_len, kHeads, kKvHeads, head_dim};
  const auto probs_size = static_cast<std::size_t>(gpu_dims.probs_count());
  DeviceBuffer<float> q(stream, saved.get("attn.q")), k(stream, saved.get("attn.k")), v(stream, saved.get("attn.v"));
  DeviceBuffer<float> probs(stream, probs_size), context(stream, q_size);
  attention_forward(stream, gpu_dims, q.get(), k.get(), v.get(), probs.get(), context.get());
  const std::vector<float> got_probs = probs.download();
  check_close(got_probs, saved.get("attn.probs"), 1e-5, 1e-6, "attention probs" + where);
  check_close(context.download(), saved.get("attn.context"), 1e-5, 1e-6, "attention context" + where);
  std::size_t unmasked = 0;  // above the diagonal the probabilities are exactly zero, as on the CPU
  const auto s = static_cast<std::size_t>(seq_len);
  for (std::size_t row = 0; row < probs_size / s; ++row) {
    for (std::size_t j = row % s + 1; j < s; ++j) {
      if (got_probs[row * s + j] != 0.0f) ++unmasked;
    }
  }
  CHECK_MESSAGE(unmasked == 0, "causal mask: a query sees a later key" << where);

  DeviceBuffer<float> d_context(stream, d_out), d_scores(stream, probs_size);
  DeviceBuffer<float> dq(stream, q_size), dk(stream, kv_size), dv(stream, kv_size);
  attention_backward(stream, gpu_dims, q.get(), k.get(), v.get(), probs.get(), d_context.get(), d_scores.get(),
                     dq.get(), dk.get(), dv.get());
  DeviceBuffer<float> cos(stream, static_cast<std::size_t>(seq_len * head_dim / 2)), sin(stream, cos.size());
  rope_table(stream, seq_len, head_dim, dims.rope_theta, cos.get(), sin.get());
  rope_backward(stream, cos.get(), sin.get(), seq_len, dq.get(), tokens, kHeads, head_dim);
  rope_backward(stream, cos.get(), sin.get(), seq_len, dk.get(), tokens, kKvHeads, head_dim);
  check_close(dq.download(), transposed(g_q, hidden, tokens), 1e-5, 1e-5, "attention dq (after inverse RoPE)" + where);
  check_close(dk.download(), transposed(g_k, kv, tokens), 1e-5, 1e-5, "attention dk (after inverse RoPE)" + where);
  check_close(dv.download(), transposed(g_v, kv, tokens), 1e-5, 1e-5, "attention dv" + where);
}

// Reference: runtime::attention_forward / attention_backward, with the identity as normalized input and as o_proj
// (Note [Identity input]). Then the CPU's saved "attn.q", "attn.k" (after RoPE) and "attn.v" are the kernel's
// inputs, its "attn.probs" and "attn.context" the expected outputs, d_context is d_out itself, and the q/k/v
// projection gradients are dq, dk, dv transposed — after the inverse RoPE, which the test applies on the GPU too
// (rope_backward), so the backward check covers the kernels in the order the executor chains them. 4 query heads
// over 2 kv heads exercise the group mapping (head h reads kv head h / 2) and the group sum of dk, dv. Two shapes:
// the test model's (2 sequences of 16, head_dim 8), and one sequence of 136 tokens (head_dim 34), longer than the
// 128 threads a query row gets, so the row loops take more than one turn.
// Tolerances: probs and context rel 1e-5 / abs 1e-6 (dots over head_dim and sums over ≤ seq terms, in another order
// than Eigen's); dq, dk, dv rel 1e-5 / abs 1e-5: three chained reductions with sign cancellation (dP − Σ P·dP, then
// sums over rows and group heads) leave absolute errors of a few 1e-7 on O(1) values; the abs bound is 10–30× that.
TEST_CASE("kernel: attention") {
  Stream stream;
  check_attention(stream, kMicroBatch, kSeqLen);
  check_attention(stream, 1, 136);
}

}  // namespace
}  // namespace shardplan::gpu::kernels::testing
