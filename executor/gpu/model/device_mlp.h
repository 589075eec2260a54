// SwiGLU MLP on the device (Shazeer 2020): the feed-forward half of a llama decoder block, as runtime/mlp.h.
#pragma once

#include "device_layer.h"
#include "device_linear.h"
#include "layer_kernel.h"

namespace shardplan::gpu {

// out[T × hidden] = down(silu(gate(x)) ⊙ up(x)) for the normalized input x. Keeps "mlp.gate", "mlp.up", "mlp.silu"
// and "mlp.act" (down_proj input) as runtime::mlp_forward does. Overwrites out.
void device_mlp_forward(const DeviceContext& context, const runtime::DecoderDims& dims,
                        const DeviceLayerParams& params, std::int64_t tokens, const GemmOperand& normed,
                        DeviceSaved& saved, float* out);

// Given d_out [T × hidden]: adds the projection gradients into `grads` and writes d_normed = dL/d(normed).
void device_mlp_backward(const DeviceContext& context, const runtime::DecoderDims& dims,
                         const DeviceLayerParams& params, std::int64_t tokens, const GemmOperand& normed,
                         const DeviceSaved& saved, const float* d_out, const DeviceLayerGrads& grads,
                         float* d_normed);

}  // namespace shardplan::gpu
