// Device final norm ("model.norm"): RMSNorm over the hidden states, forward and backward.
#include "device_buffers.h"
#include "device_kernels.h"
#include "device_layer_kinds.h"
#include "errors.h"

namespace shardplan::gpu {
namespace {

// As runtime's RMSNormLayer: one weight vector of hidden_size (fp32 values of a bf16 weight when gathered in bf16).
class DeviceRMSNormLayer final : public DeviceLayer {
 public:
  explicit DeviceRMSNormLayer(const runtime::DecoderDims& dims) : dims_(dims) {}
  LayerKind kind() const override { return LayerKind::norm; }
  const char* kernel_name() const override { return "rmsnorm"; }
  std::int64_t output_width() const override { return dims_.hidden_size; }

 protected:
  std::int64_t input_width() const override { return dims_.hidden_size; }

  DeviceActivations run_forward(const DeviceContext& context, const DeviceLayerParams& params,
                                const DeviceBatch& batch, const DeviceActivations& input, ActivationCheckpointing,
                                DeviceSaved& saved) const override {
    const std::int64_t rows = batch.token_count(), width = dims_.hidden_size;
    DeviceActivations out = make_activations(context, batch.micro_batch, batch.seq_len, width);
    float* inv_rms = saved.put("inv_rms", float_buffer(context, rows)).as<float>();
    DeviceBuffer scratch;
    kernels::rmsnorm_forward(context.stream, input.data(), weight(context, params, scratch), rows, width,
                             dims_.rms_norm_eps, out.data(), inv_rms);
    return out;
  }

  DeviceActivations run_backward(const DeviceContext& context, const DeviceLayerParams& params,
                                 const DeviceSaved& saved, const DeviceActivations& grad_output,
                                 const DeviceLayerGrads& grads, float) const override {
    const std::int64_t rows = saved.batch.token_count(), width = dims_.hidden_size;
    DeviceActivations grad_input = make_activations(context, saved.batch.micro_batch, saved.batch.seq_len, width);
    DeviceBuffer scratch;
    // Written, not accumulated: the CPU adds into a zeroed buffer, which is the same value.
    kernels::rmsnorm_backward(context.stream, saved.input.data(), saved.get("inv_rms").as<float>(),
                              weight(context, params, scratch), grad_output.data(), rows, width, grad_input.data(),
                              false, grads.tensor("weight"));
    return grad_input;
  }

 private:
  const float* weight(const DeviceContext& context, const DeviceLayerParams& params, DeviceBuffer& scratch) const {
    const DeviceTensor& tensor = params.tensor("weight");
    SHARDPLAN_CHECK(tensor.element_count == dims_.hidden_size, "rmsnorm: weight size");
    return fp32_values(context, tensor, scratch);
  }

  runtime::DecoderDims dims_;
};

}  // namespace

std::unique_ptr<DeviceLayer> make_device_rmsnorm_layer(const runtime::DecoderDims& dims) {
  return std::make_unique<DeviceRMSNormLayer>(dims);
}

}  // namespace shardplan::gpu
