// Vocabulary-parallel layers of a TP rank: the token embedding (RowwiseParallel over the vocabulary) and the lm_head
// with loss parallel (ColwiseParallel, the cross-entropy on vocabulary-sharded logits).
#include <cmath>

#include "errors.h"
#include "linear.h"
#include "row_reductions.h"
#include "tensor_parallel_group.h"

namespace shardplan::runtime {
namespace {

// Note [Vocabulary-parallel layers]: Note [Tensor parallelism] in costmodel/tensor_parallel.h. TP rank r holds rows
// [r·V/t, (r+1)·V/t) of the [V, h] table (the embedding's, or the head's: its own or the tied one). Both layers read
// the TP group's whole micro-batch of ids (Note [Sequence-parallel tokens]: every TP rank loads the same batch).
// - Embedding: each rank looks every token up in its rows (zero for a token outside them); the partial sums are
//   reduce-scattered onto the sequence shards (Megatron-LM's VocabParallelEmbedding; DTensor's _MaskPartial, then
//   RowwiseParallel's output_layouts=Shard(1)). Backward all-gathers dL/dy and scatter-adds the rows it holds.
// - Head: the sequence shard's hidden states are all-gathered and multiplied by the rank's rows, so each rank holds
//   V/t logits of every token; the cross-entropy then all-reduces per token the maximum logit (MAX), the sum of
//   exponentials and the target's logit (SUM), as torch/distributed/tensor/parallel/loss.py does in _log_softmax and
//   _nll_loss_forward. Every rank gets the micro-batch's mean loss. Backward needs no collective for the logits
//   (dL/dz = (softmax − onehot)/T on the rank's columns, loss.py's _nll_loss_and_log_softmax_backward); the input
//   gradient is partial over the vocabulary shards and reduce-scattered onto the sequence shards.
// Exactly one rank holds each token's row and target, and the other ranks add zeros, so the sums are those of the
// single-process kernels; only the sum of exponentials is split into t partial sums.
std::int64_t whole_tokens(std::int64_t local, const TensorParallelGroup& group) { return local * group.degree(); }

void check_id(std::int32_t id, std::int64_t vocab, std::int64_t position, const char* what) {
  if (id < 0 || id >= vocab) {
    throw InputError("batch: " + std::string(what) + " " + std::to_string(id) + " at position " +
                     std::to_string(position) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
}

class VocabParallelEmbedding final : public LayerKernel {
 public:
  VocabParallelEmbedding(const DecoderDims& rank_dims, TensorParallelGroup& group) : dims_(rank_dims), group_(&group) {}
  LayerKind kind() const override { return LayerKind::embedding; }
  const char* kernel_name() const override { return "vocab_parallel_embedding"; }
  InputIds input_ids() const override { return InputIds::tokens; }
  bool reads_group_ids() const override { return true; }
  std::int64_t output_width() const override { return dims_.hidden_size; }

 protected:
  std::int64_t input_width() const override { return 0; }

  Activations run_forward(const LayerParams& params, const LayerInput& input, ActivationCheckpointing,
                          SavedActivations&) const override {
    const std::int64_t h = dims_.hidden_size, rows = dims_.vocab_size, first = group_->rank() * rows;
    const std::int64_t whole = whole_tokens(input.token_count(), *group_);
    ConstMatrixView table(params.tensor("weight"), rows, h);
    std::vector<float> partial(static_cast<std::size_t>(whole * h), 0.0f);
    MatrixView out_rows(partial.data(), whole, h);
    for (std::int64_t t = 0; t < whole; ++t) {
      const std::int32_t token = input.ids[static_cast<std::size_t>(t)];
      check_id(token, rows * group_->degree(), t, "token");
      if (token >= first && token < first + rows) out_rows.row(t) = table.row(token - first);
    }
    Activations out = Activations::zeros(input.micro_batch, input.seq_len, h);
    group_->reduce_scatter(partial, out.values);
    return out;  // backward needs only the ids, kept by the driver
  }

  Activations run_backward(const LayerParams&, const SavedActivations& saved, const Activations& grad_output,
                           const LayerParams& grads) const override {
    const std::int64_t h = dims_.hidden_size, rows = dims_.vocab_size, first = group_->rank() * rows;
    const std::int64_t whole = whole_tokens(grad_output.token_count(), *group_);
    std::vector<float> grad_whole(static_cast<std::size_t>(whole * h));
    group_->all_gather(grad_output.values, grad_whole);
    SHARDPLAN_CHECK(grads.tensor("weight") != nullptr, "vocab-parallel embedding: a frozen table under TP");
    MatrixView grad_table(grads.tensor("weight"), rows, h);
    ConstMatrixView grad_rows(grad_whole.data(), whole, h);
    // In token order, as the single-process kernel, so a repeated token sums its rows in the same order.
    for (std::int64_t t = 0; t < whole; ++t) {
      const std::int32_t token = saved.ids[static_cast<std::size_t>(t)];
      if (token >= first && token < first + rows) grad_table.row(token - first) += grad_rows.row(t);
    }
    return {};
  }

 private:
  DecoderDims dims_;
  TensorParallelGroup* group_;
};

class LossParallelHead final : public LayerKernel {
 public:
  LossParallelHead(const DecoderDims& rank_dims, TensorParallelGroup& group) : dims_(rank_dims), group_(&group) {}
  LayerKind kind() const override { return LayerKind::lm_head; }
  const char* kernel_name() const override { return "loss_parallel_lm_head"; }
  InputIds input_ids() const override { return InputIds::targets; }
  bool reads_group_ids() const override { return true; }
  // It keeps the gathered input the linear reads (as DTensor's linear saves its redistributed input); nothing keeps
  // the rank's own rows.
  bool backward_reads_input() const override { return false; }
  std::int64_t output_width() const override { return 1; }
  // loss.py's _nll_loss_and_log_softmax_backward (Note [Loss-parallel workspaces] in costmodel/tensor_parallel.cpp):
  // zeros_like(x), exp(x) and their sum alive together, on the rank's V/t columns of every token of the micro-batch.
  std::int64_t backward_workspace_bytes(const SavedActivations& saved) const override {
    return 3 * whole_tokens(static_cast<std::int64_t>(saved.micro_batch) * saved.seq_len, *group_) *
           dims_.vocab_size * static_cast<std::int64_t>(sizeof(float));
  }

 protected:
  std::int64_t input_width() const override { return dims_.hidden_size; }

  Activations run_forward(const LayerParams& params, const LayerInput& input, ActivationCheckpointing,
                          SavedActivations& saved) const override {
    const std::int64_t h = dims_.hidden_size, columns = dims_.vocab_size, first = group_->rank() * columns;
    const std::int64_t whole = whole_tokens(input.token_count(), *group_);
    const auto rows = static_cast<std::size_t>(whole);
    std::vector<float>& gathered = saved.put("gathered", std::vector<float>(rows * static_cast<std::size_t>(h)));
    group_->all_gather(input.hidden, gathered);
    std::vector<float> probs(rows * static_cast<std::size_t>(columns));
    linear_forward({whole, h, columns}, gathered.data(), params.tensor("weight"), nullptr, probs.data());
    MatrixView P(probs.data(), whole, columns);
    std::vector<float> max_logit(rows), sum_exp(rows), target_logit(rows, 0.0f);
    for (std::int64_t t = 0; t < whole; ++t) {
      const std::int32_t target = input.ids[static_cast<std::size_t>(t)];
      check_id(target, columns * group_->degree(), t, "target");
      if (target >= first && target < first + columns) target_logit[static_cast<std::size_t>(t)] = P(t, target - first);
      max_logit[static_cast<std::size_t>(t)] = P.row(t).maxCoeff();
    }
    group_->all_reduce_max(max_logit);
    for (std::int64_t t = 0; t < whole; ++t) {  // Note [Deterministic reductions]
      const auto i = static_cast<std::size_t>(t);
      sum_exp[i] = static_cast<float>(exp_shifted_sum(P.row(t).data(), columns, max_logit[i], 1.0f));
    }
    group_->all_reduce(sum_exp);
    group_->all_reduce(target_logit);
    double loss_sum = 0.0;  // double: T terms of O(ln V) each, summed in a fixed order
    for (std::int64_t t = 0; t < whole; ++t) {
      const auto i = static_cast<std::size_t>(t);
      P.row(t) /= sum_exp[i];
      loss_sum += static_cast<double>(max_logit[i]) + std::log(static_cast<double>(sum_exp[i])) - target_logit[i];
    }
    saved.put("probs", std::move(probs));
    return Activations::scalar(static_cast<float>(loss_sum / static_cast<double>(whole)));
  }

  Activations run_backward(const LayerParams& params, const SavedActivations& saved, const Activations& grad_output,
                           const LayerParams& grads) const override {
    const std::int64_t local = static_cast<std::int64_t>(saved.micro_batch) * saved.seq_len;
    const std::int64_t whole = whole_tokens(local, *group_), h = dims_.hidden_size, columns = dims_.vocab_size;
    const std::int64_t first = group_->rank() * columns;
    // loss.py's three buffers (backward_workspace_bytes): grad_input = zeros_like(x) with -1 at the targets this rank
    // holds, exp(x) (the kept probabilities), and (grad_input + exp(x)), scaled by g/T in place.
    const float scale = grad_output.values[0] / static_cast<float>(whole);
    std::vector<float> grad_nll(static_cast<std::size_t>(whole * columns), 0.0f);
    MatrixView dN(grad_nll.data(), whole, columns);
    for (std::int64_t t = 0; t < whole; ++t) {
      const std::int32_t target = saved.ids[static_cast<std::size_t>(t)];
      if (target >= first && target < first + columns) dN(t, target - first) = -1.0f;
    }
    std::vector<float> exp_x = saved.get("probs");
    std::vector<float> grad_logits(grad_nll.size());
    MatrixView dZ(grad_logits.data(), whole, columns);
    dZ = dN + ConstMatrixView(exp_x.data(), whole, columns);
    dZ *= scale;
    grad_nll = {};
    exp_x = {};
    std::vector<float> grad_gathered(static_cast<std::size_t>(whole * h));
    linear_backward({whole, h, columns}, saved.get("gathered").data(), params.tensor("weight"), grad_logits.data(),
                    grad_gathered.data(), false, grads.tensor("weight"), nullptr);
    Activations grad_input = Activations::zeros(saved.micro_batch, saved.seq_len, h);
    group_->reduce_scatter(grad_gathered, grad_input.values);
    return grad_input;
  }

 private:
  DecoderDims dims_;
  TensorParallelGroup* group_;
};

}  // namespace

std::unique_ptr<LayerKernel> make_vocab_parallel_embedding(const DecoderDims& rank_dims, TensorParallelGroup& group) {
  return std::make_unique<VocabParallelEmbedding>(rank_dims, group);
}

std::unique_ptr<LayerKernel> make_loss_parallel_head(const DecoderDims& rank_dims, TensorParallelGroup& group) {
  return std::make_unique<LossParallelHead>(rank_dims, group);
}

}  // namespace shardplan::runtime
