// Device LM head + mean next-token cross-entropy ("lm_head", own weight or tied to the embedding's).
#include "device_buffers.h"
#include "device_kernels.h"
#include "device_layer_kinds.h"
#include "device_linear.h"
#include "errors.h"

namespace shardplan::gpu {
namespace {

// As runtime's LmHeadLoss: loss = (1/T) Σ_t [logsumexp(z_t) − z_t[y_t]] with z = h·Wᵀ, dL/dz_t = (softmax(z_t) −
// onehot(y_t))·loss_scale/T. It reads the tensor "weight" [vocab, hidden] the caller binds: its own, or (tied) the
// embedding's (ModelLayout::param_owner), whose gradient it then adds into. The output is one float, the mean loss
// ({1, 1, 1} activations, as Activations::scalar). A target outside the vocabulary gives a NaN loss, not InputError.
class DeviceLmHeadLoss final : public DeviceLayer {
 public:
  explicit DeviceLmHeadLoss(const runtime::DecoderDims& dims) : dims_(dims) {}
  LayerKind kind() const override { return LayerKind::lm_head; }
  const char* kernel_name() const override { return "lm_head_loss"; }
  std::int64_t output_width() const override { return 1; }

 protected:
  std::int64_t input_width() const override { return dims_.hidden_size; }

  DeviceActivations run_forward(const DeviceContext& context, const DeviceLayerParams& params,
                                const DeviceBatch& batch, const DeviceActivations& input, ActivationCheckpointing,
                                DeviceSaved& saved) const override {
    const std::int64_t rows = batch.token_count(), vocab = dims_.vocab_size, width = dims_.hidden_size;
    // The logits, turned into probabilities in place by the cross-entropy kernel (the CPU's "probs").
    float* probs = saved.put("probs", float_buffer(context, rows * vocab)).as<float>();
    device_linear_forward(context, {rows, width, vocab}, GemmOperand(context, input.data(), rows * width),
                          params.tensor("weight"), nullptr, probs);
    DeviceBuffer token_loss = float_buffer(context, rows);
    DeviceActivations loss = make_activations(context, 1, 1, 1);
    kernels::cross_entropy_forward(context.stream, probs, batch.targets, rows, vocab, probs, token_loss.as<float>(),
                                   loss.data());
    return loss;
  }

  DeviceActivations run_backward(const DeviceContext& context, const DeviceLayerParams& params,
                                 const DeviceSaved& saved, const DeviceActivations&, const DeviceLayerGrads& grads,
                                 float loss_scale) const override {
    const std::int64_t rows = saved.batch.token_count(), vocab = dims_.vocab_size, width = dims_.hidden_size;
    // A new buffer, as the CPU copies "probs": the saved state stays intact (a recompute-free rerun stays valid).
    DeviceBuffer grad_logits = float_buffer(context, rows * vocab);
    kernels::cross_entropy_backward(context.stream, saved.get("probs").as<float>(), saved.batch.targets, rows, vocab,
                                    loss_scale, grad_logits.as<float>());
    DeviceActivations grad_input = make_activations(context, saved.batch.micro_batch, saved.batch.seq_len, width);
    device_linear_backward(context, {rows, width, vocab}, GemmOperand(context, saved.input.data(), rows * width),
                           params.tensor("weight"), GemmOperand(context, grad_logits.as<float>(), rows * vocab),
                           grad_input.data(), false, grads.tensor("weight"), nullptr);
    return grad_input;
  }

 private:
  runtime::DecoderDims dims_;
};

}  // namespace

std::unique_ptr<DeviceLayer> make_device_lm_head_loss(const runtime::DecoderDims& dims) {
  return std::make_unique<DeviceLmHeadLoss>(dims);
}

}  // namespace shardplan::gpu
