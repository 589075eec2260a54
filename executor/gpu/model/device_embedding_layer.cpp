// Device token embedding ("model.embed_tokens"): a row gather forward, a scatter-add of rows backward.
#include <cuda_bf16.h>

#include "device_buffers.h"
#include "device_elementwise.h"
#include "device_kernels.h"
#include "device_layer_kinds.h"
#include "errors.h"

namespace shardplan::gpu {
namespace {

// As runtime's EmbeddingLayer, except for token ids outside the vocabulary: the CPU throws InputError, a kernel
// cannot, so such a token yields a NaN row (and a NaN loss) instead (kernels::embedding_forward).
class DeviceEmbeddingLayer final : public DeviceLayer {
 public:
  explicit DeviceEmbeddingLayer(const runtime::DecoderDims& dims) : dims_(dims) {}
  LayerKind kind() const override { return LayerKind::embedding; }
  const char* kernel_name() const override { return "embedding"; }
  std::int64_t output_width() const override { return dims_.hidden_size; }

 protected:
  std::int64_t input_width() const override { return 0; }

  DeviceActivations run_forward(const DeviceContext& context, const DeviceLayerParams& params,
                                const DeviceBatch& batch, const DeviceActivations&, ActivationCheckpointing,
                                DeviceSaved&) const override {
    const DeviceTensor& table = params.tensor("weight");
    SHARDPLAN_CHECK(table.element_count == dims_.vocab_size * dims_.hidden_size, "embedding: table size");
    DeviceActivations out = make_activations(context, batch.micro_batch, batch.seq_len, dims_.hidden_size);
    if (table.dtype == DeviceDType::f32) {
      kernels::embedding_forward(context.stream, batch.tokens, static_cast<const float*>(table.data),
                                 batch.token_count(), dims_.vocab_size, dims_.hidden_size, out.data());
    } else {
      embedding_forward_bf16(context.stream, batch.tokens, static_cast<const __nv_bfloat16*>(table.data),
                             batch.token_count(), dims_.vocab_size, dims_.hidden_size, out.data());
    }
    // Backward needs only the token ids, which the driver keeps in saved.batch.
    return out;
  }

  DeviceActivations run_backward(const DeviceContext& context, const DeviceLayerParams&, const DeviceSaved& saved,
                                 const DeviceActivations& grad_output, const DeviceLayerGrads& grads,
                                 float) const override {
    // The gradient is fp32 whatever the table's dtype. atomicAdd: rows of a repeated token sum in any order (Note
    // [Embedding scatter] in embedding.cu), where the CPU sums them in token order.
    kernels::embedding_backward(context.stream, saved.batch.tokens, grad_output.data(), grad_output.token_count(),
                                dims_.vocab_size, dims_.hidden_size, grads.tensor("weight"));
    return {};  // token ids have no gradient
  }

 private:
  runtime::DecoderDims dims_;
};

}  // namespace

std::unique_ptr<DeviceLayer> make_device_embedding_layer(const runtime::DecoderDims& dims) {
  return std::make_unique<DeviceEmbeddingLayer>(dims);
}

}  // namespace shardplan::gpu
