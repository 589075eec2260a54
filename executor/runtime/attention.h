// Causal grouped-query self-attention with RoPE: the attention half of a llama decoder block, forward and backward.
#pragma once

#include <vector>

#include "layer_kernel.h"

namespace shardplan::runtime {

class ContextParallelGroup;  // ring_attention.h

// Shapes for one micro-batch; T = micro_batch·seq_len tokens.
struct AttentionShape {
  int micro_batch = 0;
  int seq_len = 0;
  std::int64_t tokens() const { return static_cast<std::int64_t>(micro_batch) * seq_len; }
};

// out[T × hidden] = o_proj(softmax(mask(RoPE(q)·RoPE(k)ᵀ/√d)) · v) with q, k, v projections of the normalized input
// `normed` (Vaswani et al. 2017; grouped-query heads: Ainslie et al. 2023, query head h reads kv head
// h / (heads/kv_heads), as HF repeat_kv). Saves "attn.q", "attn.k" (after RoPE), "attn.v", "attn.context" (o_proj
// input) and, when keep_probs, "attn.probs" [micro_batch × heads × seq × seq] — selective checkpointing drops the
// s² term and attention_backward rebuilds it from q and k (Korthikanti et al. 2022, §5).
// With a `ring` (context parallelism, Note [Context-parallel runner] in executor/runner/context_parallel_runner.h)
// `shape` is this CP rank's share of each sequence (seq_len = whole / degree tokens at load_balanced_positions, which
// RoPE rotates by), the core is ring attention (Note [Ring attention core]) and "attn.lse" replaces "attn.probs".
void attention_forward(const DecoderDims& dims, const LayerParams& params, const AttentionShape& shape,
                       const float* normed, bool keep_probs, SavedActivations& saved, float* out,
                       const ProgressPoll& progress = {}, ContextParallelGroup* ring = nullptr);

// Given d_out = dL/d(out): adds the projection gradients into `grads` and writes d_normed = dL/d(normed).
void attention_backward(const DecoderDims& dims, const LayerParams& params, const AttentionShape& shape,
                        const float* normed, const SavedActivations& saved, const float* d_out,
                        const LayerParams& grads, float* d_normed, const ProgressPoll& progress = {},
                        ContextParallelGroup* ring = nullptr);

}  // namespace shardplan::runtime
