// SwiGLU MLP (Shazeer 2020, "GLU Variants Improve Transformer"): the feed-forward half of a llama decoder block.
#pragma once

#include "layer_kernel.h"

namespace shardplan::runtime {

// out[T × hidden] = down(silu(gate(x)) ⊙ up(x)) for the normalized input x, silu(g) = g·σ(g) (Elfwing et al. 2018).
// Saves "mlp.gate", "mlp.up", "mlp.silu" and "mlp.act" (down_proj input), as PyTorch eager keeps them.
void mlp_forward(const DecoderDims& dims, const LayerParams& params, std::int64_t tokens, const float* normed,
                 SavedActivations& saved, float* out, const ProgressPoll& progress = {});

// Given d_out: adds the projection gradients into `grads` and writes d_normed = dL/d(normed).
void mlp_backward(const DecoderDims& dims, const LayerParams& params, std::int64_t tokens, const float* normed,
                  const SavedActivations& saved, const float* d_out, const LayerParams& grads, float* d_normed,
                  const ProgressPoll& progress = {});

}  // namespace shardplan::runtime
