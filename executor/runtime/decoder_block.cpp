// Llama decoder block kernel ("model.layers.N"): x + attn(norm(x)), then h + mlp(norm(h)), forward and backward.
#include "attention.h"
#include "layer_kernel.h"
#include "mlp.h"
#include "rmsnorm.h"

namespace shardplan::runtime {
namespace {

// Pre-norm residual block as HF LlamaDecoderLayer: h = x + Attention(RMSNorm₁(x)); y = h + MLP(RMSNorm₂(h)).
// Kept for backward (besides the input the driver keeps): both norms' outputs and 1/rms, the residual h, and what the
// attention and MLP halves keep — per token 6h + 2·kv + 4f floats (+2 for 1/rms) and heads·s for the attention
// probabilities, the accounting of LayerSpec::activations in costmodel/decoder_builder.cpp.
class DecoderBlock final : public LayerKernel {
 public:
  explicit DecoderBlock(const DecoderDims& dims) : dims_(dims) {}
  LayerKind kind() const override { return LayerKind::transformer_block; }
  const char* kernel_name() const override { return "decoder_block"; }
  std::int64_t output_width() const override { return dims_.hidden_size; }

 protected:
  std::int64_t input_width() const override { return dims_.hidden_size; }

  Activations run_forward(const LayerParams& params, const LayerInput& input, ActivationCheckpointing checkpointing,
                          SavedActivations& saved) const override {
    const std::int64_t t = input.token_count(), h = dims_.hidden_size;
    const auto rows = static_cast<std::size_t>(t), size = static_cast<std::size_t>(t * h);
    const float* x = input.hidden.data();
    std::vector<float>& inv_rms1 = saved.put("attn_norm.inv_rms", std::vector<float>(rows));
    std::vector<float>& normed1 = saved.put("attn_norm.out", std::vector<float>(size));
    rmsnorm_forward(x, params.tensor("input_layernorm.weight"), t, h, dims_.rms_norm_eps, normed1.data(),
                    inv_rms1.data());
    std::vector<float>& residual = saved.put("residual", std::vector<float>(size));
    const bool keep_probs = checkpointing != ActivationCheckpointing::selective;
    attention_forward(dims_, params, {input.micro_batch, input.seq_len}, normed1.data(), keep_probs, saved,
                      residual.data(), progress_hook());
    MatrixView(residual.data(), t, h) += ConstMatrixView(x, t, h);
    poll(progress_hook());  // Note [Progress hook]

    std::vector<float>& inv_rms2 = saved.put("mlp_norm.inv_rms", std::vector<float>(rows));
    std::vector<float>& normed2 = saved.put("mlp_norm.out", std::vector<float>(size));
    rmsnorm_forward(residual.data(), params.tensor("post_attention_layernorm.weight"), t, h, dims_.rms_norm_eps,
                    normed2.data(), inv_rms2.data());
    Activations out = Activations::zeros(input.micro_batch, input.seq_len, h);
    mlp_forward(dims_, params, t, normed2.data(), saved, out.values.data(), progress_hook());
    MatrixView(out.values.data(), t, h) += ConstMatrixView(residual.data(), t, h);
    return out;
  }

  Activations run_backward(const LayerParams& params, const SavedActivations& saved, const Activations& grad_output,
                           const LayerParams& grads) const override {
    const std::int64_t t = grad_output.token_count(), h = dims_.hidden_size;
    const auto size = static_cast<std::size_t>(t * h);
    // y = h + mlp(norm₂(h)): dL/dh = dy + norm₂ᵀ(mlpᵀ(dy)).
    std::vector<float> d_normed(size);
    mlp_backward(dims_, params, t, saved.get("mlp_norm.out").data(), saved, grad_output.values.data(), grads,
                 d_normed.data(), progress_hook());
    poll(progress_hook());  // Note [Progress hook]
    std::vector<float> d_residual = grad_output.values;
    rmsnorm_backward(saved.get("residual").data(), saved.get("mlp_norm.inv_rms").data(),
                     params.tensor("post_attention_layernorm.weight"), d_normed.data(), t, h, d_residual.data(),
                     grads.tensor("post_attention_layernorm.weight"));
    // h = x + attn(norm₁(x)): dL/dx = dh + norm₁ᵀ(attnᵀ(dh)).
    attention_backward(dims_, params, {saved.micro_batch, saved.seq_len}, saved.get("attn_norm.out").data(), saved,
                       d_residual.data(), grads, d_normed.data(), progress_hook());
    Activations grad_input{saved.micro_batch, saved.seq_len, h, std::move(d_residual)};
    rmsnorm_backward(saved.input.data(), saved.get("attn_norm.inv_rms").data(),
                     params.tensor("input_layernorm.weight"), d_normed.data(), t, h, grad_input.values.data(),
                     grads.tensor("input_layernorm.weight"));
    return grad_input;
  }

 private:
  DecoderDims dims_;
};

}  // namespace

std::unique_ptr<LayerKernel> make_decoder_block(const DecoderDims& dims) {
  return std::make_unique<DecoderBlock>(dims);
}

}  // namespace shardplan::runtime
