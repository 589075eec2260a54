// Causal grouped-query self-attention with RoPE on the device: the attention half of a llama decoder block, as
// runtime/attention.h, forward and backward.
#pragma once

#include "device_layer.h"
#include "device_linear.h"
#include "layer_kernel.h"

namespace shardplan::gpu {

struct DeviceAttentionShape {
  int micro_batch = 0;
  int seq_len = 0;
  std::int64_t tokens() const { return static_cast<std::int64_t>(micro_batch) * seq_len; }
};

// out[T × hidden] = o_proj(softmax(mask(RoPE(q)·RoPE(k)ᵀ/√d)) · v) of the normalized input `normed` [T × hidden].
// Keeps what runtime::attention_forward keeps, under the same names: "attn.q", "attn.k" (after RoPE), "attn.v",
// "attn.context" and, when keep_probs, "attn.probs" [micro_batch × heads × seq × seq]. Overwrites out.
void device_attention_forward(const DeviceContext& context, const runtime::DecoderDims& dims,
                              const DeviceLayerParams& params, const DeviceAttentionShape& shape,
                              const GemmOperand& normed, bool keep_probs, DeviceSaved& saved, float* out);

// Given d_out = dL/d(out): adds the projection gradients into `grads` and writes d_normed = dL/d(normed). Without
// "attn.probs" (selective checkpointing) it rebuilds them from q, k and v with the forward's own kernel, so their
// bits equal the kept ones.
void device_attention_backward(const DeviceContext& context, const runtime::DecoderDims& dims,
                               const DeviceLayerParams& params, const DeviceAttentionShape& shape,
                               const GemmOperand& normed, const DeviceSaved& saved, const float* d_out,
                               const DeviceLayerGrads& grads, float* d_normed);

}  // namespace shardplan::gpu
