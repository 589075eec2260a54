// Device attention: q/k/v/o GEMMs (device_linear.h) around the RoPE and attention kernels, forward and backward.
#include "device_attention.h"

#include "device_buffers.h"
#include "device_kernels.h"
#include "errors.h"

namespace shardplan::gpu {
namespace {

kernels::AttentionDims attention_dims(const runtime::DecoderDims& dims, const DeviceAttentionShape& shape) {
  // Query heads span the hidden size (decoder_dims: head_dim = hidden / heads), so q is [T × hidden] as on the CPU.
  SHARDPLAN_CHECK(dims.num_heads * dims.head_dim == dims.hidden_size, "attention: heads·head_dim != hidden_size");
  return {shape.micro_batch, shape.seq_len, dims.num_heads, dims.num_kv_heads, dims.head_dim};
}

// cos and sin [seq_len × head_dim/2], as runtime::rope_table; rebuilt per call (O(seq·head_dim), next to O(T·h²)).
struct DeviceRopeTable {
  DeviceBuffer cos;
  DeviceBuffer sin;
};
DeviceRopeTable rope_table(const DeviceContext& context, const runtime::DecoderDims& dims, std::int64_t seq_len) {
  DeviceRopeTable table{float_buffer(context, seq_len * dims.head_dim / 2),
                        float_buffer(context, seq_len * dims.head_dim / 2)};
  kernels::rope_table(context.stream, seq_len, dims.head_dim, dims.rope_theta, table.cos.as<float>(),
                      table.sin.as<float>());
  return table;
}

}  // namespace

void device_attention_forward(const DeviceContext& context, const runtime::DecoderDims& dims,
                              const DeviceLayerParams& params, const DeviceAttentionShape& shape,
                              const GemmOperand& normed, bool keep_probs, DeviceSaved& saved, float* out) {
  const std::int64_t t = shape.tokens(), h = dims.hidden_size, kv = dims.kv_dim(), d = dims.head_dim;
  const kernels::AttentionDims attention = attention_dims(dims, shape);
  float* q = saved.put("attn.q", float_buffer(context, t * h)).as<float>();
  float* k = saved.put("attn.k", float_buffer(context, t * kv)).as<float>();
  float* v = saved.put("attn.v", float_buffer(context, t * kv)).as<float>();
  device_linear_forward(context, {t, h, h}, normed, params.tensor("self_attn.q_proj.weight"),
                        params.find("self_attn.q_proj.bias"), q);
  device_linear_forward(context, {t, h, kv}, normed, params.tensor("self_attn.k_proj.weight"),
                        params.find("self_attn.k_proj.bias"), k);
  device_linear_forward(context, {t, h, kv}, normed, params.tensor("self_attn.v_proj.weight"),
                        params.find("self_attn.v_proj.bias"), v);
  const DeviceRopeTable rope = rope_table(context, dims, shape.seq_len);
  kernels::rope_forward(context.stream, rope.cos.as<float>(), rope.sin.as<float>(), shape.seq_len, q, t,
                        dims.num_heads, d);
  kernels::rope_forward(context.stream, rope.cos.as<float>(), rope.sin.as<float>(), shape.seq_len, k, t,
                        dims.num_kv_heads, d);

  DeviceBuffer probs = float_buffer(context, attention.probs_count());
  float* attn_context = saved.put("attn.context", float_buffer(context, t * h)).as<float>();
  kernels::attention_forward(context.stream, attention, q, k, v, probs.as<float>(), attn_context);
  device_linear_forward(context, {t, h, h}, GemmOperand(context, attn_context, t * h),
                        params.tensor("self_attn.o_proj.weight"), nullptr, out);
  // Selective checkpointing drops the s² term (Korthikanti et al. 2022, §5); the buffer is then released on the
  // stream after the kernels above that read it.
  if (keep_probs) saved.put("attn.probs", std::move(probs));
}

void device_attention_backward(const DeviceContext& context, const runtime::DecoderDims& dims,
                               const DeviceLayerParams& params, const DeviceAttentionShape& shape,
                               const GemmOperand& normed, const DeviceSaved& saved, const float* d_out,
                               const DeviceLayerGrads& grads, float* d_normed) {
  const std::int64_t t = shape.tokens(), h = dims.hidden_size, kv = dims.kv_dim(), d = dims.head_dim;
  const kernels::AttentionDims attention = attention_dims(dims, shape);
  const float* q = saved.get("attn.q").as<float>();
  const float* k = saved.get("attn.k").as<float>();
  const float* v = saved.get("attn.v").as<float>();
  const float* attn_context = saved.get("attn.context").as<float>();

  // Selective checkpointing: attention_forward's probs kernel, on the same q and k, rebuilds P bit for bit; the
  // context it also writes (P·v, equal to the kept "attn.context") goes to a scratch buffer and is dropped.
  DeviceBuffer rebuilt;
  const float* probs = nullptr;
  if (saved.has("attn.probs")) {
    probs = saved.get("attn.probs").as<float>();
  } else {
    rebuilt = float_buffer(context, attention.probs_count());
    DeviceBuffer discarded_context = float_buffer(context, t * h);
    kernels::attention_forward(context.stream, attention, q, k, v, rebuilt.as<float>(),
                               discarded_context.as<float>());
    probs = rebuilt.as<float>();
  }

  DeviceBuffer d_context = float_buffer(context, t * h);
  device_linear_backward(context, {t, h, h}, GemmOperand(context, attn_context, t * h),
                         params.tensor("self_attn.o_proj.weight"), GemmOperand(context, d_out, t * h),
                         d_context.as<float>(), false, grads.tensor("self_attn.o_proj.weight"), nullptr);

  DeviceBuffer dq = float_buffer(context, t * h);
  DeviceBuffer dk = float_buffer(context, t * kv), dv = float_buffer(context, t * kv);
  {
    DeviceBuffer d_scores = float_buffer(context, attention.probs_count());  // scratch, dropped once enqueued
    kernels::attention_backward(context.stream, attention, q, k, v, probs, d_context.as<float>(),
                                d_scores.as<float>(), dq.as<float>(), dk.as<float>(), dv.as<float>());
  }
  const DeviceRopeTable rope = rope_table(context, dims, shape.seq_len);
  kernels::rope_backward(context.stream, rope.cos.as<float>(), rope.sin.as<float>(), shape.seq_len, dq.as<float>(),
                         t, dims.num_heads, d);
  kernels::rope_backward(context.stream, rope.cos.as<float>(), rope.sin.as<float>(), shape.seq_len, dk.as<float>(),
                         t, dims.num_kv_heads, d);
  device_linear_backward(context, {t, h, h}, normed, params.tensor("self_attn.q_proj.weight"),
                         GemmOperand(context, dq.as<float>(), t * h), d_normed, false,
                         grads.tensor("self_attn.q_proj.weight"), grads.find("self_attn.q_proj.bias"));
  device_linear_backward(context, {t, h, kv}, normed, params.tensor("self_attn.k_proj.weight"),
                         GemmOperand(context, dk.as<float>(), t * kv), d_normed, true,
                         grads.tensor("self_attn.k_proj.weight"), grads.find("self_attn.k_proj.bias"));
  device_linear_backward(context, {t, h, kv}, normed, params.tensor("self_attn.v_proj.weight"),
                         GemmOperand(context, dv.as<float>(), t * kv), d_normed, true,
                         grads.tensor("self_attn.v_proj.weight"), grads.find("self_attn.v_proj.bias"));
}

}  // namespace shardplan::gpu
