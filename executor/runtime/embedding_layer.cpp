// Token embedding kernel ("model.embed_tokens"): a row lookup forward, a scatter-add of rows backward.
#include "errors.h"
#include "layer_kernel.h"

namespace shardplan::runtime {
namespace {

class EmbeddingLayer final : public LayerKernel {
 public:
  explicit EmbeddingLayer(const DecoderDims& dims) : dims_(dims) {}
  LayerKind kind() const override { return LayerKind::embedding; }
  const char* kernel_name() const override { return "embedding"; }
  InputIds input_ids() const override { return InputIds::tokens; }
  std::int64_t output_width() const override { return dims_.hidden_size; }

 protected:
  std::int64_t input_width() const override { return 0; }

  Activations run_forward(const LayerParams& params, const LayerInput& input, ActivationCheckpointing,
                          SavedActivations&) const override {
    const std::int64_t width = dims_.hidden_size;
    ConstMatrixView table(params.tensor("weight"), dims_.vocab_size, width);
    Activations out = Activations::zeros(input.micro_batch, input.seq_len, width);
    MatrixView rows(out.values.data(), input.token_count(), width);
    for (std::int64_t t = 0; t < input.token_count(); ++t) {
      const std::int32_t token = input.ids[static_cast<std::size_t>(t)];
      if (token < 0 || token >= dims_.vocab_size) {
        throw InputError("batch: token " + std::to_string(token) + " at position " + std::to_string(t) +
                         " is outside the vocabulary [0, " + std::to_string(dims_.vocab_size) + ")");
      }
      rows.row(t) = table.row(token);
    }
    // Backward needs only the token ids, which the driver keeps in saved.ids (PyTorch's embedding keeps its indices).
    return out;
  }

  Activations run_backward(const LayerParams&, const SavedActivations& saved, const Activations& grad_output,
                           const LayerParams& grads) const override {
    const std::int64_t width = dims_.hidden_size;
    if (grads.tensor("weight") == nullptr) return {};  // a frozen table (Note [Fine-tuning layout])
    MatrixView grad_table(grads.tensor("weight"), dims_.vocab_size, width);
    ConstMatrixView grad_rows(grad_output.values.data(), grad_output.token_count(), width);
    // In token order, so a token repeated in the batch always sums its rows in the same order (deterministic).
    for (std::int64_t t = 0; t < grad_output.token_count(); ++t) {
      grad_table.row(saved.ids[static_cast<std::size_t>(t)]) += grad_rows.row(t);
    }
    return {};  // token ids have no gradient
  }

 private:
  DecoderDims dims_;
};

}  // namespace

std::unique_ptr<LayerKernel> make_embedding_layer(const DecoderDims& dims) {
  return std::make_unique<EmbeddingLayer>(dims);
}

}  // namespace shardplan::runtime
