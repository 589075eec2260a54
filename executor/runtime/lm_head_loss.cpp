// LM head + mean next-token cross-entropy kernel ("lm_head", own weight or tied to the embedding's).
#include <cmath>

#include "errors.h"
#include "layer_kernel.h"
#include "linear.h"
#include "row_reductions.h"

namespace shardplan::runtime {
namespace {

// loss = (1/T) Σ_t [logsumexp(z_t) − z_t[y_t]] with z = h·Wᵀ; dL/dz_t = (softmax(z_t) − onehot(y_t)) / T.
// The kernel reads the tensor called "weight" of shape [vocab, hidden]: its own, or (tied) the embedding's, which the
// caller binds instead (ModelLayout::param_owner); the gradient then adds into the embedding's gradient.
class LmHeadLoss final : public LayerKernel {
 public:
  explicit LmHeadLoss(const DecoderDims& dims) : dims_(dims) {}
  LayerKind kind() const override { return LayerKind::lm_head; }
  const char* kernel_name() const override { return "lm_head_loss"; }
  InputIds input_ids() const override { return InputIds::targets; }
  std::int64_t output_width() const override { return 1; }
  // nll_loss's and log_softmax's fp32 gradients (run_backward), V floats per token each.
  std::int64_t backward_workspace_bytes(const SavedActivations& saved) const override {
    return 2 * static_cast<std::int64_t>(saved.micro_batch) * saved.seq_len * dims_.vocab_size *
           static_cast<std::int64_t>(sizeof(float));
  }

 protected:
  std::int64_t input_width() const override { return dims_.hidden_size; }

  Activations run_forward(const LayerParams& params, const LayerInput& input, ActivationCheckpointing,
                          SavedActivations& saved) const override {
    const std::int64_t rows = input.token_count(), vocab = dims_.vocab_size;
    std::vector<float> probs(static_cast<std::size_t>(rows * vocab));
    linear_forward({rows, dims_.hidden_size, vocab}, input.hidden.data(), params.tensor("weight"), nullptr,
                   probs.data());
    MatrixView P(probs.data(), rows, vocab);
    double loss_sum = 0.0;  // double: T terms of O(ln V) each, summed in a fixed order
    for (std::int64_t t = 0; t < rows; ++t) {
      const std::int32_t target = input.ids[static_cast<std::size_t>(t)];
      if (target < 0 || target >= vocab) {
        throw InputError("batch: target " + std::to_string(target) + " at position " + std::to_string(t) +
                         " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
      }
      // Subtracting the row maximum keeps exp() finite (the usual stable log-sum-exp).
      const float max_logit = P.row(t).maxCoeff();
      const float target_logit = P(t, target);
      const double sum = exp_shifted_sum(P.row(t).data(), vocab, max_logit, 1.0f);  // Note [Deterministic reductions]
      P.row(t) /= static_cast<float>(sum);
      loss_sum += static_cast<double>(max_logit) + std::log(sum) - target_logit;
    }
    saved.put("probs", std::move(probs));
    return Activations::scalar(static_cast<float>(loss_sum / static_cast<double>(rows)));
  }

  Activations run_backward(const LayerParams& params, const SavedActivations& saved, const Activations& grad_output,
                           const LayerParams& grads) const override {
    const std::int64_t rows = static_cast<std::int64_t>(saved.micro_batch) * saved.seq_len;
    const std::int64_t vocab = dims_.vocab_size, width = dims_.hidden_size;
    // As PyTorch eager's cross_entropy backward (Note [Workspaces] in planner/unit_layout.h): nll_loss's gradient, a
    // zero-filled fp32 row per token with -g/N at its target, then log_softmax's, g/N · p + that, both alive at once.
    const float scale = grad_output.values[0] / static_cast<float>(rows);
    std::vector<float> grad_nll(static_cast<std::size_t>(rows * vocab), 0.0f);
    MatrixView dN(grad_nll.data(), rows, vocab);
    for (std::int64_t t = 0; t < rows; ++t) dN(t, saved.ids[static_cast<std::size_t>(t)]) = -scale;
    std::vector<float> grad_logits = saved.get("probs");
    MatrixView dZ(grad_logits.data(), rows, vocab);
    dZ *= scale;
    dZ += dN;
    grad_nll = {};
    Activations grad_input = Activations::zeros(saved.micro_batch, saved.seq_len, width);
    linear_backward({rows, width, vocab}, saved.input.data(), params.tensor("weight"), grad_logits.data(),
                    grad_input.values.data(), false, grads.tensor("weight"), nullptr);
    return grad_input;
  }

 private:
  DecoderDims dims_;
};

}  // namespace

std::unique_ptr<LayerKernel> make_lm_head_loss(const DecoderDims& dims) { return std::make_unique<LmHeadLoss>(dims); }

}  // namespace shardplan::runtime
