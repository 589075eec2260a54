// Device SwiGLU MLP: gate/up/down GEMMs (device_linear.h) around the swiglu kernels, forward and backward.
#include "device_mlp.h"

#include "device_buffers.h"
#include "device_elementwise.h"
#include "device_kernels.h"

namespace shardplan::gpu {

void device_mlp_forward(const DeviceContext& context, const runtime::DecoderDims& dims,
                        const DeviceLayerParams& params, std::int64_t tokens, const GemmOperand& normed,
                        DeviceSaved& saved, float* out) {
  const std::int64_t h = dims.hidden_size, f = dims.intermediate_size, n = tokens * f;
  float* gate = saved.put("mlp.gate", float_buffer(context, n)).as<float>();
  float* up = saved.put("mlp.up", float_buffer(context, n)).as<float>();
  device_linear_forward(context, {tokens, h, f}, normed, params.tensor("mlp.gate_proj.weight"), nullptr, gate);
  device_linear_forward(context, {tokens, h, f}, normed, params.tensor("mlp.up_proj.weight"), nullptr, up);
  // "mlp.silu" is kept so that the saved tensors (and their bytes, which the pool accounts as activations) are the
  // CPU runtime's and the memory model's (4f per token); swiglu_backward itself recomputes silu from the gate.
  float* silu = saved.put("mlp.silu", float_buffer(context, n)).as<float>();
  float* act = saved.put("mlp.act", float_buffer(context, n)).as<float>();
  silu_forward(context.stream, gate, n, silu);
  kernels::swiglu_forward(context.stream, gate, up, n, act);
  device_linear_forward(context, {tokens, f, h}, GemmOperand(context, act, n), params.tensor("mlp.down_proj.weight"),
                        nullptr, out);
}

void device_mlp_backward(const DeviceContext& context, const runtime::DecoderDims& dims,
                         const DeviceLayerParams& params, std::int64_t tokens, const GemmOperand& normed,
                         const DeviceSaved& saved, const float* d_out, const DeviceLayerGrads& grads,
                         float* d_normed) {
  const std::int64_t h = dims.hidden_size, f = dims.intermediate_size, n = tokens * f;
  DeviceBuffer d_act = float_buffer(context, n);
  device_linear_backward(context, {tokens, f, h}, GemmOperand(context, saved.get("mlp.act").as<float>(), n),
                         params.tensor("mlp.down_proj.weight"), GemmOperand(context, d_out, tokens * h),
                         d_act.as<float>(), false, grads.tensor("mlp.down_proj.weight"), nullptr);
  // act = silu(g)·u: d_up = da·silu(g); d_gate = da·u·σ(g)·(1 + g·(1 − σ(g))).
  DeviceBuffer d_gate = float_buffer(context, n), d_up = float_buffer(context, n);
  kernels::swiglu_backward(context.stream, saved.get("mlp.gate").as<float>(), saved.get("mlp.up").as<float>(),
                           d_act.as<float>(), n, d_gate.as<float>(), d_up.as<float>());
  device_linear_backward(context, {tokens, h, f}, normed, params.tensor("mlp.gate_proj.weight"),
                         GemmOperand(context, d_gate.as<float>(), n), d_normed, false,
                         grads.tensor("mlp.gate_proj.weight"), nullptr);
  device_linear_backward(context, {tokens, h, f}, normed, params.tensor("mlp.up_proj.weight"),
                         GemmOperand(context, d_up.as<float>(), n), d_normed, true, grads.tensor("mlp.up_proj.weight"),
                         nullptr);
}

}  // namespace shardplan::gpu
