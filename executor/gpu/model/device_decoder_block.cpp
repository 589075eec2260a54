// Device llama decoder block ("model.layers.N"): x + attn(norm(x)), then h + mlp(norm(h)), forward and backward.
#include "device_attention.h"
#include "device_buffers.h"
#include "device_elementwise.h"
#include "device_kernels.h"
#include "device_layer_kinds.h"
#include "device_mlp.h"
#include "errors.h"

namespace shardplan::gpu {
namespace {

// Pre-norm residual block as runtime's DecoderBlock (decoder_block.cpp), step for step and with the same saved
// tensors: both norms' outputs and 1/rms, the residual h, and what the attention and MLP halves keep.
class DeviceDecoderBlock final : public DeviceLayer {
 public:
  explicit DeviceDecoderBlock(const runtime::DecoderDims& dims) : dims_(dims) {}
  LayerKind kind() const override { return LayerKind::transformer_block; }
  const char* kernel_name() const override { return "decoder_block"; }
  std::int64_t output_width() const override { return dims_.hidden_size; }

 protected:
  std::int64_t input_width() const override { return dims_.hidden_size; }

  DeviceActivations run_forward(const DeviceContext& context, const DeviceLayerParams& params,
                                const DeviceBatch& batch, const DeviceActivations& input,
                                ActivationCheckpointing checkpointing, DeviceSaved& saved) const override {
    const std::int64_t t = batch.token_count(), h = dims_.hidden_size, size = t * h;
    const float* x = input.data();
    float* inv_rms1 = saved.put("attn_norm.inv_rms", float_buffer(context, t)).as<float>();
    float* normed1 = saved.put("attn_norm.out", float_buffer(context, size)).as<float>();
    DeviceBuffer scratch1, scratch2;
    kernels::rmsnorm_forward(context.stream, x, norm_weight(context, params, "input_layernorm.weight", scratch1), t, h,
                             dims_.rms_norm_eps, normed1, inv_rms1);
    float* residual = saved.put("residual", float_buffer(context, size)).as<float>();
    const bool keep_probs = checkpointing != ActivationCheckpointing::selective;
    device_attention_forward(context, dims_, params, {batch.micro_batch, batch.seq_len},
                             GemmOperand(context, normed1, size), keep_probs, saved, residual);
    add_in_place(context.stream, residual, x, size);

    float* inv_rms2 = saved.put("mlp_norm.inv_rms", float_buffer(context, t)).as<float>();
    float* normed2 = saved.put("mlp_norm.out", float_buffer(context, size)).as<float>();
    kernels::rmsnorm_forward(context.stream, residual,
                             norm_weight(context, params, "post_attention_layernorm.weight", scratch2), t, h,
                             dims_.rms_norm_eps, normed2, inv_rms2);
    DeviceActivations out = make_activations(context, batch.micro_batch, batch.seq_len, h);
    device_mlp_forward(context, dims_, params, t, GemmOperand(context, normed2, size), saved, out.data());
    add_in_place(context.stream, out.data(), residual, size);
    return out;
  }

  DeviceActivations run_backward(const DeviceContext& context, const DeviceLayerParams& params,
                                 const DeviceSaved& saved, const DeviceActivations& grad_output,
                                 const DeviceLayerGrads& grads, float) const override {
    const std::int64_t t = saved.batch.token_count(), h = dims_.hidden_size, size = t * h;
    // y = h + mlp(norm₂(h)): dL/dh = dy + norm₂ᵀ(mlpᵀ(dy)).
    DeviceBuffer d_normed = float_buffer(context, size);
    device_mlp_backward(context, dims_, params, t, GemmOperand(context, saved.get("mlp_norm.out").as<float>(), size),
                        saved, grad_output.data(), grads, d_normed.as<float>());
    DeviceActivations d_residual = copy_activations(context, grad_output);
    DeviceBuffer scratch1, scratch2;
    kernels::rmsnorm_backward(context.stream, saved.get("residual").as<float>(),
                              saved.get("mlp_norm.inv_rms").as<float>(),
                              norm_weight(context, params, "post_attention_layernorm.weight", scratch2),
                              d_normed.as<float>(), t, h, d_residual.data(), true,
                              grads.tensor("post_attention_layernorm.weight"));
    // h = x + attn(norm₁(x)): dL/dx = dh + norm₁ᵀ(attnᵀ(dh)). d_normed is rewritten: stream order puts that after
    // the norm backward above has read it.
    device_attention_backward(context, dims_, params, {saved.batch.micro_batch, saved.batch.seq_len},
                              GemmOperand(context, saved.get("attn_norm.out").as<float>(), size), saved,
                              d_residual.data(), grads, d_normed.as<float>());
    kernels::rmsnorm_backward(context.stream, saved.input.data(), saved.get("attn_norm.inv_rms").as<float>(),
                              norm_weight(context, params, "input_layernorm.weight", scratch1), d_normed.as<float>(),
                              t, h, d_residual.data(), true, grads.tensor("input_layernorm.weight"));
    return d_residual;  // dL/dx, accumulated in place of dL/dh
  }

 private:
  const float* norm_weight(const DeviceContext& context, const DeviceLayerParams& params, const char* name,
                           DeviceBuffer& scratch) const {
    const DeviceTensor& tensor = params.tensor(name);
    SHARDPLAN_CHECK(tensor.element_count == dims_.hidden_size, std::string("decoder block: size of ") + name);
    return fp32_values(context, tensor, scratch);
  }

  runtime::DecoderDims dims_;
};

}  // namespace

std::unique_ptr<DeviceLayer> make_device_decoder_block(const runtime::DecoderDims& dims) {
  return std::make_unique<DeviceDecoderBlock>(dims);
}

}  // namespace shardplan::gpu
