// Context parallelism's checks, a CP rank's plan and each layer's ring (Note [Context-parallel lowering]).
#include "context_parallel_lowering.h"

#include <algorithm>

#include "errors.h"

namespace shardplan {

void validate_context_parallel(int degree, const TrainingConfig& training, const ModelSpec& model,
                               const std::string& where) {
  const std::string value = where + " " + std::to_string(degree) + ": ";
  if (degree < 1) throw InputError(value + "expected a degree >= 1");
  if (degree == 1) return;
  if (!training.flash_attention) {
    throw InputError(value + "expected flash attention (torch's context_parallel runs SDPA's flash and efficient "
                     "kernels only; drop --no-flash-attention)");
  }
  if (training.expert_parallel_degree > 1) {
    throw InputError(value + "expected 1 beside --expert-parallel " +
                     std::to_string(training.expert_parallel_degree) + " (not yet lowered together)");
  }
  // The layers first: a model without a decoder architecture is often one with a layer CP cannot take (Llama 4's
  // vision tower and chunked attention), which says more than the missing architecture.
  for (const LayerSpec& layer : model.layers) {
    if (layer.fixed_tokens_per_sample) {
      throw InputError(value + "expected 1 for a model with layers of their own token count ('" + layer.name +
                       "': a vision tower; not yet lowered)");
    }
    if (layer.flops.attention_window > 0 && layer.flops.attention_window < training.seq_len) {
      throw InputError(value + "expected 1 for sliding-window or chunked attention ('" + layer.name +
                       "'): torch's ring attention takes a causal mask only");
    }
  }
  if (!model.architecture) {
    throw InputError(value + "expected a decoder of known architecture (a preset or a Hugging Face config.json)");
  }
  if (model.architecture->mla) {
    throw InputError(value + "expected 1 for multi-head latent attention (not yet lowered)");
  }
  if (training.seq_len % (2 * std::int64_t{degree}) != 0) {
    // torch's _generate_round_robin_indices (Note [Load-balanced causal sharding] in context_parallel.h).
    throw InputError(value + "expected --seq-len " + std::to_string(training.seq_len) + " to be a multiple of 2 x " +
                     std::to_string(degree) + " = " + std::to_string(2 * std::int64_t{degree}) +
                     " (torch's load-balanced sharding cuts each sequence into 2 x cp equal chunks)");
  }
}

TrainingConfig context_parallel_share_training(const TrainingConfig& training, int degree) {
  TrainingConfig share = training;
  share.seq_len = training.seq_len / degree;
  share.global_batch = training.global_batch * degree;
  return share;
}

Plan context_parallel_plan_of_share(const Plan& share_plan, int degree) {
  if (degree <= 1 || share_plan.context_parallel.degree == degree) return share_plan;
  Plan plan = share_plan;
  plan.training.seq_len = share_plan.training.seq_len * degree;
  plan.training.global_batch = share_plan.training.global_batch / degree;  // the share counted × cp; 0 stays 0
  plan.context_parallel.degree = degree;
  return plan;
}

Plan context_parallel_rank_plan(const Plan& plan) {
  Plan rank = plan;
  rank.training.seq_len = plan.training.seq_len / plan.context_parallel.degree;
  return rank;
}

std::optional<ContextParallelAttention> layer_ring_attention(const ModelSpec& model, std::size_t layer,
                                                             const TrainingConfig& training, int degree) {
  const LayerSpec& spec = model.layers[layer];
  if (!spec.kernels || !spec.kernels->attention || !model.architecture) return std::nullopt;
  const AttentionSpec& attention = *spec.kernels->attention;
  AttentionShape shape;
  shape.batch = training.micro_batch;
  shape.seq_len = training.seq_len;
  shape.heads = attention.heads;
  // Note [Ring attention]: the K/V heads SDPA is called with. A block that copies K and V up to every query head
  // first (its repeat_kv kernel, block_kernels.cpp) passes all its heads; else the TP shard's kv_heads / tp
  // (ColwiseParallel on k and v, Note [Tensor parallel degree]).
  const auto& elementwise = spec.kernels->elementwise;
  const bool repeats_kv = std::any_of(elementwise.begin(), elementwise.end(),
                                      [](const auto& kernel) { return kernel.name == "repeat_kv"; });
  shape.kv_heads = repeats_kv ? attention.heads
                              : std::max<std::int64_t>(
                                    1, model.architecture->num_kv_heads / spec.kernels->tensor_parallel_degree);
  shape.head_dim = attention.head_dim;
  shape.element_bytes = training.precision.param_compute_bytes;
  shape.causal = attention.causal;
  ContextParallelOptions options;
  options.degree = degree;
  return context_parallel_attention(shape, options);
}

}  // namespace shardplan
