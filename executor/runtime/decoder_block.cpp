// Llama decoder block kernel ("model.layers.N"): x + attn(norm(x)), then h + mlp(norm(h)), forward and backward —
// whole, or as one TP rank's sequence-parallel block between the TP group's all-gathers and reduce-scatters.
#include "attention.h"
#include "errors.h"
#include "layer_kernel.h"
#include "mlp.h"
#include "ring_attention.h"
#include "rmsnorm.h"
#include "tensor_parallel_group.h"

namespace shardplan::runtime {
namespace {

// Pre-norm residual block as HF LlamaDecoderLayer: h = x + Attention(RMSNorm₁(x)); y = h + MLP(RMSNorm₂(h)). Kept for
// backward (besides the input the driver keeps): both norms' outputs (under TP their gathered copies instead, Note
// [Sequence-parallel block]) and 1/rms, the residual h, and what the attention and MLP halves keep — per token 6h +
// 2·kv + 4f floats (+2 for 1/rms) and heads·s for the attention probabilities, the accounting of LayerSpec::activations
// in costmodel/decoder_builder.cpp.
//
// Note [Sequence-parallel block]: Korthikanti et al. 2022, §4.2.2 (Fig. 5): with sequence parallelism a block's input x
// is split by tokens (Note [Sequence-parallel tokens]); per half, g = all-gather of the normalized tokens feeds the
// column-parallel GEMMs (q, k, v: this rank's heads; gate, up: its FFN slice), the row-parallel GEMM (o, down) yields a
// partial sum of the whole micro-batch's output, and ḡ = reduce-scatter sums it and leaves this rank's tokens. Backward
// is the conjugate: all-gather of dL/dy before the row-parallel backward, reduce-scatter of the partial dL/d(normed)
// after the column-parallel one. So each pass runs 2 all-gathers and 2 reduce-scatters of whole-tokens × hidden floats
// (the cost model's tp_forward and tp_backward of a block), as Megatron's `_GatherFromSequenceParallelRegion` /
// `_ReduceScatterToSequenceParallelRegion` pair per half. The norm scales are whole and see only this rank's tokens:
// their gradients are partial over the TP group (the executor sums them after this backward, Note [Replicated
// gradients] in executor/runner/tensor_parallel_runner.h). Forward keeps both gathered inputs, as DTensor's linear
// saves its redistributed input (Megatron re-gathers them in backward to save memory), and not the rank's own normed
// rows, which nothing in torch keeps either — so backward needs no third all-gather per half, and the tracked
// activations are the cost model's (tests/mpi_runner/test_tensor_parallel.cpp). Without a TP group g and ḡ are
// identities and the halves work on the block's own buffers: the same code is the whole block, bit for bit. With a CP
// `ring` the block runs on a CP rank's share of each sequence and its attention core is ring attention over the CP
// group (Note [Context-parallel runner] in executor/runner/context_parallel_runner.h); everything else is per token and
// runs unchanged. With both, the TP group's whole micro-batch is one CP rank's share (the TP ranks of a CP rank split
// its rows): g gathers the share's tokens, and the ring carries this TP rank's heads' K/V among the CP ranks of its TP
// coordinate.
class DecoderBlock final : public LayerKernel {
 public:
  // `group` null: the whole block on `dims`. Otherwise one TP rank's (dims: tensor_parallel_dims) on its share of
  // the `whole` micro-batch. `ring`: the CP group, or null.
  DecoderBlock(const DecoderDims& dims, const AttentionShape& whole, TensorParallelGroup* group,
               ContextParallelGroup* ring = nullptr)
      : dims_(dims), whole_(whole), group_(group), ring_(ring) {}
  LayerKind kind() const override { return LayerKind::transformer_block; }
  const char* kernel_name() const override {
    return group_ ? "sequence_parallel_decoder_block" : ring_ ? "context_parallel_decoder_block" : "decoder_block";
  }
  std::int64_t output_width() const override { return dims_.hidden_size; }

 protected:
  std::int64_t input_width() const override { return dims_.hidden_size; }

  Activations run_forward(const LayerParams& params, const LayerInput& input, ActivationCheckpointing checkpointing,
                          SavedActivations& saved) const override {
    const std::int64_t t = input.token_count(), h = dims_.hidden_size;
    const Region region = region_of(t, {input.micro_batch, input.seq_len});
    const auto rows = static_cast<std::size_t>(t), size = static_cast<std::size_t>(t * h);
    const float* x = input.hidden.data();
    // A norm's output is its half's input, kept; under TP only until g gathers it: the half reads the gathered copy,
    // as DTensor's linear saves its redistributed input, and nothing keeps the rank's own rows.
    std::vector<float> own_rows;
    const auto normed_rows = [&](const char* name) -> std::vector<float>& {
      if (!group_) return saved.put(name, std::vector<float>(size));
      own_rows.assign(size, 0.0f);
      return own_rows;
    };
    std::vector<float>& inv_rms1 = saved.put("attn_norm.inv_rms", std::vector<float>(rows));
    std::vector<float>& normed1 = normed_rows("attn_norm.out");
    rmsnorm_forward(x, params.tensor("input_layernorm.weight"), t, h, dims_.rms_norm_eps, normed1.data(),
                    inv_rms1.data());
    std::vector<float>& residual = saved.put("residual", std::vector<float>(size));
    std::vector<float> partial(group_ ? static_cast<std::size_t>(region.tokens * h) : 0);  // ḡ's input
    const bool keep_probs = checkpointing != ActivationCheckpointing::selective;
    attention_forward(dims_, params, region.shape, gather(normed1, "attn_norm", saved), keep_probs, saved,
                      group_ ? partial.data() : residual.data(), progress_hook(), ring_);
    if (group_) group_->reduce_scatter(partial, residual);
    MatrixView(residual.data(), t, h) += ConstMatrixView(x, t, h);
    poll(progress_hook());  // Note [Progress hook]

    std::vector<float>& inv_rms2 = saved.put("mlp_norm.inv_rms", std::vector<float>(rows));
    std::vector<float>& normed2 = normed_rows("mlp_norm.out");
    rmsnorm_forward(residual.data(), params.tensor("post_attention_layernorm.weight"), t, h, dims_.rms_norm_eps,
                    normed2.data(), inv_rms2.data());
    Activations out = Activations::zeros(input.micro_batch, input.seq_len, h);
    mlp_forward(dims_, params, region.tokens, gather(normed2, "mlp_norm", saved), saved,
                group_ ? partial.data() : out.values.data(), progress_hook());
    if (group_) group_->reduce_scatter(partial, out.values);
    MatrixView(out.values.data(), t, h) += ConstMatrixView(residual.data(), t, h);
    return out;
  }

  Activations run_backward(const LayerParams& params, const SavedActivations& saved, const Activations& grad_output,
                           const LayerParams& grads) const override {
    const std::int64_t t = grad_output.token_count(), h = dims_.hidden_size;
    const Region region = region_of(t, {saved.micro_batch, saved.seq_len});
    const auto size = static_cast<std::size_t>(t * h);
    std::vector<float> d_whole(group_ ? static_cast<std::size_t>(region.tokens * h) : 0), d_partial(d_whole.size());
    // dL/d(a half's output) as the half sees it: ḡ's adjoint, the all-gather of this rank's rows.
    const auto gathered_grad = [&](const std::vector<float>& local) {
      if (!group_) return local.data();
      group_->all_gather(local, d_whole);
      return static_cast<const float*>(d_whole.data());
    };
    // y = h + mlp(norm₂(h)): dL/dh = dy + norm₂ᵀ(mlpᵀ(dy)); g's adjoint is a reduce-scatter.
    std::vector<float> d_normed(size);
    mlp_backward(dims_, params, region.tokens, half_input(saved, "mlp_norm"), saved, gathered_grad(grad_output.values),
                 grads, group_ ? d_partial.data() : d_normed.data(), progress_hook());
    if (group_) group_->reduce_scatter(d_partial, d_normed);
    poll(progress_hook());  // Note [Progress hook]
    std::vector<float> d_residual = grad_output.values;
    rmsnorm_backward(saved.get("residual").data(), saved.get("mlp_norm.inv_rms").data(),
                     params.tensor("post_attention_layernorm.weight"), d_normed.data(), t, h, d_residual.data(),
                     grads.tensor("post_attention_layernorm.weight"));
    // h = x + attn(norm₁(x)): dL/dx = dh + norm₁ᵀ(attnᵀ(dh)).
    attention_backward(dims_, params, region.shape, half_input(saved, "attn_norm"), saved, gathered_grad(d_residual),
                       grads, group_ ? d_partial.data() : d_normed.data(), progress_hook(), ring_);
    if (group_) group_->reduce_scatter(d_partial, d_normed);
    Activations grad_input{saved.micro_batch, saved.seq_len, h, std::move(d_residual)};
    rmsnorm_backward(saved.input.data(), saved.get("attn_norm.inv_rms").data(),
                     params.tensor("input_layernorm.weight"), d_normed.data(), t, h, grad_input.values.data(),
                     grads.tensor("input_layernorm.weight"));
    return grad_input;
  }

 private:
  // The tokens the attention and MLP halves work on: the block's own, or the TP group's whole micro-batch.
  struct Region {
    std::int64_t tokens;
    AttentionShape shape;
  };
  Region region_of(std::int64_t local, const AttentionShape& own) const {
    if (!group_) return {local, own};
    SHARDPLAN_CHECK(local * group_->degree() == whole_.tokens(),
                    "sequence-parallel block: " + std::to_string(local) + " tokens on a rank of a TP group of " +
                        std::to_string(group_->degree()) + " sharing " + std::to_string(whole_.tokens()));
    return {whole_.tokens(), whole_};
  }

  // A half's input: the norm's output, or g = its all-gather over the TP group, kept as "<norm>.gathered".
  const float* gather(const std::vector<float>& normed, const std::string& norm, SavedActivations& saved) const {
    if (!group_) return normed.data();
    std::vector<float>& gathered =
        saved.put(norm + ".gathered", std::vector<float>(normed.size() * static_cast<std::size_t>(group_->degree())));
    group_->all_gather(normed, gathered);
    return gathered.data();
  }
  const float* half_input(const SavedActivations& saved, const std::string& norm) const {
    return saved.get(norm + (group_ ? ".gathered" : ".out")).data();
  }

  DecoderDims dims_;
  AttentionShape whole_;
  TensorParallelGroup* group_;
  ContextParallelGroup* ring_;
};

}  // namespace

std::unique_ptr<LayerKernel> make_decoder_block(const DecoderDims& dims) {
  return std::make_unique<DecoderBlock>(dims, AttentionShape{}, nullptr);
}

std::unique_ptr<LayerKernel> make_sequence_parallel_block(const DecoderDims& rank_dims, const AttentionShape& whole,
                                                          TensorParallelGroup& group, ContextParallelGroup* ring) {
  return std::make_unique<DecoderBlock>(rank_dims, whole, &group, ring);
}

std::unique_ptr<LayerKernel> make_context_parallel_block(const DecoderDims& dims, ContextParallelGroup& ring) {
  return std::make_unique<DecoderBlock>(dims, AttentionShape{}, nullptr, &ring);
}

}  // namespace shardplan::runtime
