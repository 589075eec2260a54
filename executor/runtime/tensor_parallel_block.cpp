// Sequence-parallel, tensor-parallel llama decoder block: Megatron's column/row-parallel attention and MLP between
// an all-gather and a reduce-scatter of the sequence-sharded activations, forward and backward.
#include "errors.h"
#include "mlp.h"
#include "rmsnorm.h"
#include "tensor_parallel_group.h"
#include "tensor_parallel_model.h"

namespace shardplan::runtime {
namespace {

// Note [Sequence-parallel block]: Korthikanti et al. 2022, §4.2.2 (Fig. 5): with sequence parallelism a block's
// input x is split by tokens (Note [Sequence-parallel tokens]); per half, g = all-gather of the normalized tokens feeds
// the column-parallel GEMMs (q, k, v: this rank's heads; gate, up: its FFN slice), the row-parallel GEMM (o, down)
// yields a partial sum of the whole micro-batch's output, and ḡ = reduce-scatter sums it and leaves this rank's
// tokens. Backward is the conjugate: all-gather of dL/dy before the row-parallel backward, reduce-scatter of the
// partial dL/d(normed) after the column-parallel one. So each pass runs 2 all-gathers and 2 reduce-scatters of
// whole-tokens × hidden floats (kTensorParallelBlockPass), as Megatron's `_GatherFromSequenceParallelRegion` /
// `_ReduceScatterToSequenceParallelRegion` pair per half. The norm scales are replicated and see only this rank's
// tokens: their gradients are partial over the TP group (the executor sums them, Note [Replicated gradients] in
// executor/runner/tensor_parallel_runner.h). Forward keeps both gathered inputs (Megatron re-gathers them in backward
// to save memory; this block keeps them so backward needs no third all-gather per half).
class SequenceParallelBlock final : public LayerKernel {
 public:
  SequenceParallelBlock(const DecoderDims& rank_dims, const AttentionShape& whole, TensorParallelGroup& group)
      : dims_(rank_dims), whole_(whole), group_(&group) {}
  LayerKind kind() const override { return LayerKind::transformer_block; }
  const char* kernel_name() const override { return "sequence_parallel_decoder_block"; }
  std::int64_t output_width() const override { return dims_.hidden_size; }

 protected:
  std::int64_t input_width() const override { return dims_.hidden_size; }

  Activations run_forward(const LayerParams& params, const LayerInput& input, ActivationCheckpointing checkpointing,
                          SavedActivations& saved) const override {
    const std::int64_t local = input.token_count(), h = dims_.hidden_size;
    check_tokens(local);
    const auto local_size = static_cast<std::size_t>(local * h), whole_size = static_cast<std::size_t>(whole_.tokens() * h);
    const float* x = input.hidden.data();
    std::vector<float>& inv_rms1 = saved.put("attn_norm.inv_rms", std::vector<float>(static_cast<std::size_t>(local)));
    std::vector<float>& normed1 = saved.put("attn_norm.out", std::vector<float>(local_size));
    rmsnorm_forward(x, params.tensor("input_layernorm.weight"), local, h, dims_.rms_norm_eps, normed1.data(),
                    inv_rms1.data());
    std::vector<float>& gathered1 = saved.put("attn_norm.gathered", std::vector<float>(whole_size));
    group_->all_gather(normed1, gathered1);
    std::vector<float> partial(whole_size);
    const bool keep_probs = checkpointing != ActivationCheckpointing::selective;
    attention_forward(dims_, params, whole_, gathered1.data(), keep_probs, saved, partial.data(), progress_hook());
    std::vector<float>& residual = saved.put("residual", std::vector<float>(local_size));
    group_->reduce_scatter(partial, residual);
    MatrixView(residual.data(), local, h) += ConstMatrixView(x, local, h);

    std::vector<float>& inv_rms2 = saved.put("mlp_norm.inv_rms", std::vector<float>(static_cast<std::size_t>(local)));
    std::vector<float>& normed2 = saved.put("mlp_norm.out", std::vector<float>(local_size));
    rmsnorm_forward(residual.data(), params.tensor("post_attention_layernorm.weight"), local, h, dims_.rms_norm_eps,
                    normed2.data(), inv_rms2.data());
    std::vector<float>& gathered2 = saved.put("mlp_norm.gathered", std::vector<float>(whole_size));
    group_->all_gather(normed2, gathered2);
    mlp_forward(dims_, params, whole_.tokens(), gathered2.data(), saved, partial.data(), progress_hook());
    Activations out = Activations::zeros(input.micro_batch, input.seq_len, h);
    group_->reduce_scatter(partial, out.values);
    MatrixView(out.values.data(), local, h) += ConstMatrixView(residual.data(), local, h);
    return out;
  }

  Activations run_backward(const LayerParams& params, const SavedActivations& saved, const Activations& grad_output,
                           const LayerParams& grads) const override {
    const std::int64_t local = grad_output.token_count(), h = dims_.hidden_size;
    check_tokens(local);
    const auto whole_size = static_cast<std::size_t>(whole_.tokens() * h);
    // y = r + ḡ(mlp(g(norm₂(r)))): dL/dr = dy + norm₂ᵀ(ḡᵀ... ) with g's adjoint a reduce-scatter and ḡ's an
    // all-gather (Note [Sequence-parallel block]).
    std::vector<float> d_whole(whole_size), d_partial(whole_size);
    group_->all_gather(grad_output.values, d_whole);
    mlp_backward(dims_, params, whole_.tokens(), saved.get("mlp_norm.gathered").data(), saved, d_whole.data(), grads,
                 d_partial.data(), progress_hook());
    std::vector<float> d_normed(static_cast<std::size_t>(local * h));
    group_->reduce_scatter(d_partial, d_normed);
    std::vector<float> d_residual = grad_output.values;
    rmsnorm_backward(saved.get("residual").data(), saved.get("mlp_norm.inv_rms").data(),
                     params.tensor("post_attention_layernorm.weight"), d_normed.data(), local, h, d_residual.data(),
                     grads.tensor("post_attention_layernorm.weight"));
    // r = x + ḡ(attn(g(norm₁(x)))).
    group_->all_gather(d_residual, d_whole);
    attention_backward(dims_, params, whole_, saved.get("attn_norm.gathered").data(), saved, d_whole.data(), grads,
                       d_partial.data(), progress_hook());
    group_->reduce_scatter(d_partial, d_normed);
    Activations grad_input{saved.micro_batch, saved.seq_len, h, std::move(d_residual)};
    rmsnorm_backward(saved.input.data(), saved.get("attn_norm.inv_rms").data(),
                     params.tensor("input_layernorm.weight"), d_normed.data(), local, h, grad_input.values.data(),
                     grads.tensor("input_layernorm.weight"));
    return grad_input;
  }

 private:
  void check_tokens(std::int64_t local) const {
    SHARDPLAN_CHECK(local * group_->degree() == whole_.tokens(),
                    "sequence-parallel block: " + std::to_string(local) + " tokens on a rank of a TP group of " +
                        std::to_string(group_->degree()) + " sharing " + std::to_string(whole_.tokens()));
  }

  DecoderDims dims_;
  AttentionShape whole_;
  TensorParallelGroup* group_;
};

}  // namespace

std::unique_ptr<LayerKernel> make_sequence_parallel_block(const DecoderDims& rank_dims, const AttentionShape& whole,
                                                          TensorParallelGroup& group) {
  return std::make_unique<SequenceParallelBlock>(rank_dims, whole, group);
}

}  // namespace shardplan::runtime
