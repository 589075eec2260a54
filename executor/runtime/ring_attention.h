// Ring attention for context parallelism: the ring a CP rank's attention passes K/V and dK/dV around, torch's
// load-balanced token positions, and the attention core (softmax(QKᵀ/√d)·V) over the ring, forward and backward.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attention.h"

namespace shardplan::runtime {

// The runtime knows no communicator (executor/comm); an executor implements this over its CP group (Note
// [Context-parallel runner] in executor/runner/context_parallel_runner.h). Each ring step is a send of one buffer to
// the next rank, (rank + 1) mod degree, and the receive of an equal one from the one before — torch's
// _RotateMethod.ALL_TO_ALL exchange_buffers. Every rank of the group posts the same steps in the same order.
class ContextParallelGroup {
 public:
  // What a ring step carries; steps of different channels may be in flight at once (backward's K/V and dK/dV).
  enum class Channel { kv = 0, grad_kv = 1 };

  virtual ~ContextParallelGroup() = default;
  virtual int degree() const = 0;
  virtual int rank() const = 0;
  // Posts one step; `send` and `recv` (of equal size) must stay valid, and `recv` unread, until wait_ring_step(id).
  virtual int start_ring_step(std::span<const float> send, std::span<float> recv, Channel channel) = 0;
  virtual void wait_ring_step(int id) = 0;
};

// Note [Load-balanced positions]: torch's round-robin load balancer (pytorch/pytorch torch/distributed/tensor/
// experimental/_attention.py at 0123248a484ffe531edb5098b986c1bac08cd296, _generate_round_robin_indices, used by
// _RoundRobinLoadBalancer / context_parallel's load-balanced causal sharding) cuts each sequence of `seq_len` tokens
// into 2·degree chunks of c = seq_len / (2·degree) and gives rank r chunks r and 2·degree − 1 − r, in that order:
// the positions of its seq_len / degree tokens. InputError unless 2·degree divides seq_len.
std::vector<std::int64_t> load_balanced_positions(std::int64_t seq_len, int degree, int rank);

// Note [Ring attention core]: torch's _templated_ring_attention (same file) for one CP rank holding `shape`
// (micro_batch sequences of its seq_len = whole / degree tokens each, at load_balanced_positions): the rank's
// queries stay, the K/V buffer [k | v] travels — at step i the rank holds rank (r − i) mod degree's, and before
// computing step i < degree − 1 it posts the exchange that brings step i + 1's. Each step's attention of the local
// queries against the held keys, masked causally by the tokens' positions (rows with no visible key are left out, as
// torch's `partial` steps leave out the first query chunk), is merged into the running output by its log-sum-exp as
// torch's _SDPAMerger does (out −= σ(lse_step − lse)·(out − out_step); lse −= logσ(lse − lse_step)). q, k (after
// RoPE) and v are [tokens × heads·head_dim] and [tokens × kv_dim]; writes `context` [tokens × q_dim] and `lse`
// [micro_batch × heads × seq_len], what backward needs besides q, k, v (FlashAttention's saved statistics).
void ring_attention_forward(const DecoderDims& dims, const AttentionShape& shape, ContextParallelGroup& ring,
                            const float* q, const float* k, const float* v, float* context, float* lse,
                            const ProgressPoll& progress = {});

// Note [Repeated K/V]: this block is transformers' Llama block (block_kernels.cpp), which copies K and V up to every
// query head before its attention (repeat_kv) — so does torchtitan's Llama until pytorch/torchtitan#2259 (2026-01) —
// and the ring then carries every head's K/V and dK/dV, as the lowering's ring sends do (Note [Ring attention]). With
// grouped-query attention both functions therefore run the ring on the repeated K and V, and backward sums each kv
// head's copies of dK and dV (repeat_kv's backward).
//
// _templated_ring_attention_backward: the K/V travel again (degree − 1 steps); each step's dK, dV of the held keys
// are added to the dK/dV buffer received from the rank before (zeros at step 0) and sent on to the next, degree steps
// in all, so the last one brings every rank its own keys' gradients. Writes dq, dk, dv (overwritten) from
// d_context = dL/d(context), recomputing each step's probabilities from q, k and lse.
void ring_attention_backward(const DecoderDims& dims, const AttentionShape& shape, ContextParallelGroup& ring,
                             const float* q, const float* k, const float* v, const float* context, const float* lse,
                             const float* d_context, float* dq, float* dk, float* dv,
                             const ProgressPoll& progress = {});

// Kernel for layer `index` of `model` on a CP rank: a decoder block whose attention is ring attention over `ring`
// (decoder_block.cpp), the ordinary kernel for every other layer (per token: it runs unchanged on the rank's share).
// `ring` must outlive the kernel. InputError as make_layer_kernel.
std::unique_ptr<LayerKernel> make_context_parallel_layer_kernel(const ModelSpec& model, std::size_t index,
                                                                ContextParallelGroup& ring);
std::unique_ptr<LayerKernel> make_context_parallel_block(const DecoderDims& dims, ContextParallelGroup& ring);

}  // namespace shardplan::runtime
