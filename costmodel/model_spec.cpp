// ModelSpec arithmetic: parameter counts, FLOPs per token and activation bytes per token, plus validation.
#include "model_spec.h"

#include <algorithm>
#include <numeric>

#include "errors.h"
#include "input_limits.h"
#include "name_suggest.h"

namespace shardplan {

const char* to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::embedding: return "embedding";
    case LayerKind::transformer_block: return "transformer_block";
    case LayerKind::norm: return "norm";
    case LayerKind::lm_head: return "lm_head";
    case LayerKind::other: return "other";
  }
  return "other";
}

LayerKind layer_kind_from_string(const std::string& text) {
  for (auto kind : {LayerKind::embedding, LayerKind::transformer_block, LayerKind::norm, LayerKind::lm_head,
                    LayerKind::other}) {
    if (text == to_string(kind)) return kind;
  }
  throw InputError("unknown layer kind '" + text + "'" +
                   did_you_mean(text, {"embedding", "transformer_block", "norm", "lm_head", "other"}));
}

const char* to_string(ActivationCheckpointing mode) {
  switch (mode) {
    case ActivationCheckpointing::none: return "none";
    case ActivationCheckpointing::selective: return "selective";
    case ActivationCheckpointing::full: return "full";
    case ActivationCheckpointing::selective_op: return "selective-op";
  }
  return "none";
}

const char* to_string(DecoderArchitecture::Family family) {
  switch (family) {
    case DecoderArchitecture::Family::gpt2: return "gpt2";
    case DecoderArchitecture::Family::gpt_neox: return "gpt_neox";
    case DecoderArchitecture::Family::llama: break;
  }
  return "llama";
}

std::int64_t TensorSpec::element_count() const {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

std::int64_t LayerSpec::param_count() const {
  std::int64_t total = 0;
  for (const auto& tensor : tensors) total += tensor.element_count();
  return total;
}

double LayerSpec::forward_flops_per_token(std::int64_t seq_len, bool causal_skip) const {
  // A causal kernel that skips the masked upper triangle does half the attention work (FlashAttention-2, §3.1), less
  // with a sliding window or in chunks (Notes [Sliding-window attention], [Chunked attention] in kernel_spec.h).
  const double attention_share =
      causal_skip ? masked_attention_share(tokens_per_sample(seq_len), flops.attention_window, flops.causal_attention,
                                           flops.attention_chunked)
                  : 1.0;
  const auto positions = static_cast<double>(tokens_per_sample(seq_len));
  return flops.matmul_flops_per_token + attention_share * flops.attention_flops_per_token_per_position * positions;
}

double LayerSpec::backward_flops_per_token(std::int64_t seq_len, bool causal_skip) const {
  if (finetune && !finetune->backward_needed) return 0;
  return 2.0 * forward_flops_per_token(seq_len, causal_skip) - flops.frozen_weight_flops_per_token;
}

double LayerSpec::activation_bytes_per_token(std::int64_t seq_len, int activation_element_bytes,
                                             AttentionActivations attention, ActivationCheckpointing checkpointing,
                                             bool torch_compile) const {
  const auto& a = activations;
  const bool compiled = torch_compile && kind == LayerKind::transformer_block;
  const double s = static_cast<double>(tokens_per_sample(seq_len));
  const bool flash_attention = attention == AttentionActivations::flash;
  if (kind == LayerKind::transformer_block && checkpointing == ActivationCheckpointing::full) {
    // Full recompute keeps only the block input: 2sbh bytes in 16-bit (Korthikanti et al. 2022, §4.1).
    return a.checkpoint_elements_per_token * activation_element_bytes;
  }
  if (kind == LayerKind::transformer_block && checkpointing == ActivationCheckpointing::selective_op) {
    // Note [Selective-op checkpointing] (pass_kernels.h): the block input, the saved matmuls' outputs and attention's
    // output, with the flash kernel's log-sum-exp (or, eager, nothing of the scores: they are recomputed).
    const double unread = compiled ? a.compiled_unread_selective_op_elements_per_token : 0.0;
    return (a.selective_op_elements_per_token - unread) * activation_element_bytes +
           (flash_attention ? a.flash_stat_bytes_per_token : 0.0);
  }
  // The fp32 copy (logits upcast for the loss) exists only when activations are narrower than fp32.
  const bool narrow = activation_element_bytes < 4;
  const double upcast = narrow ? a.fp32_bytes_per_token : 0.0;
  const double recomputed = compiled ? a.compiled_recomputed_elements_per_token : 0.0;
  double bytes = (a.elements_per_token - recomputed) * activation_element_bytes + a.mask_bytes_per_token + upcast;
  // The s² terms (softmax output, its dropout) are what selective recompute drops (Korthikanti §5) and what a flash
  // kernel never materialises; flash keeps its per-head log-sum-exp instead.
  const bool keeps_scores = !(kind == LayerKind::transformer_block &&
                              checkpointing == ActivationCheckpointing::selective);
  if (flash_attention) {
    bytes += a.flash_stat_bytes_per_token;
  } else if (keeps_scores) {
    bytes += s * (a.score_elements_per_token_per_position * activation_element_bytes +
                  a.score_mask_bytes_per_token_per_position);
  }
  if (attention == AttentionActivations::eager_composite && !compiled) {
    // Note [Eager composite activations]: the norms' extra tensors and their fp32 inputs; repeat_kv's copies and the
    // softmax's fp32 output belong to the attention core, which selective recompute rebuilds from q, k and v. A
    // compiled block saves none of these (Note [Compiled blocks]: the partitioner keeps only what a matmul's or the
    // attention's backward reads, and recomputes pointwise ops inside its fused kernels).
    bytes += a.eager_norm_elements_per_token * activation_element_bytes + 4.0 * a.eager_norm_fp32_elements_per_token +
             (narrow ? 4.0 - activation_element_bytes : 0.0) * a.eager_upcast_elements_per_token;
    if (keeps_scores) {
      bytes += a.eager_attention_elements_per_token * activation_element_bytes +
               (narrow ? 4.0 * s * a.eager_score_fp32_elements_per_token_per_position : 0.0);
    }
  }
  return bytes;
}

double LayerSpec::forward_workspace_bytes_per_token(int activation_element_bytes) const {
  const double upcast = activation_element_bytes < 4 ? 4.0 * activations.forward_workspace_fp32_per_token : 0.0;
  return upcast + activations.forward_workspace_elements_per_token * activation_element_bytes;
}

double LayerSpec::backward_workspace_bytes_per_token(int activation_element_bytes) const {
  const double cast = activation_element_bytes < 4
                          ? activations.backward_workspace_elements_per_token * activation_element_bytes
                          : 0.0;
  return 4.0 * activations.backward_workspace_fp32_per_token + cast;
}

double LayerSpec::largest_tensor_bytes_per_token(std::int64_t seq_len, int activation_element_bytes,
                                                 AttentionActivations attention) const {
  if (!kernels) return 0;
  const auto element_bytes = static_cast<double>(activation_element_bytes);
  double largest = 0;
  // y = x·Wᵀ reads x (in_features per token) and writes y (out_features); under tensor parallelism the widths are
  // the rank's shard and the tokens the gathered sequence (Note [Tensor-parallel collectives] in kernel_spec.h).
  for (const ProjectionSpec& projection : kernels->projections) {
    largest = std::max(largest, static_cast<double>(std::max(projection.in_features, projection.out_features)) *
                                    element_bytes);
  }
  // Materialised scores: one (heads × positions) row per token; eager's softmax(dtype=float32) writes them in fp32
  // (Note [Eager composite activations]).
  if (kernels->attention && attention != AttentionActivations::flash) {
    const double score_bytes = attention == AttentionActivations::eager_composite ? std::max(4.0, element_bytes)
                                                                                   : element_bytes;
    largest = std::max(largest, static_cast<double>(kernels->attention->heads) *
                                    static_cast<double>(tokens_per_sample(seq_len)) * score_bytes);
  }
  // The loss's fp32 upcast of the logits (one tensor: ActivationFootprint::fp32_bytes_per_token), whose
  // workspaces (the shifted logits, exp, the gradients) are tensors of the same shape.
  if (activation_element_bytes < 4) {
    largest = std::max(largest, activations.fp32_bytes_per_token / std::max(1, activations.fp32_tensor_count));
  }
  return largest;
}

std::int64_t ModelSpec::param_count() const {
  std::int64_t total = 0;
  for (const auto& layer : layers) total += layer.param_count();
  return total;
}

std::size_t ModelSpec::block_count() const {
  std::size_t count = 0;
  for (const auto& layer : layers) count += layer.kind == LayerKind::transformer_block ? 1 : 0;
  return count;
}

double ModelSpec::forward_flops_per_token(std::int64_t seq_len, bool causal_skip) const {
  double total = 0;
  for (const auto& layer : layers) {
    const double share = static_cast<double>(layer.tokens_per_sample(seq_len)) / static_cast<double>(seq_len);
    total += layer.forward_flops_per_token(seq_len, causal_skip) * share;
  }
  return total;
}

void validate_model(const ModelSpec& model, const std::string& origin) {
  if (model.layers.empty()) throw InputError(origin + ": field 'layers': expected at least one layer");
  for (std::size_t index = 0; index < model.layers.size(); ++index) {
    const auto& layer = model.layers[index];
    const std::string where = origin + ": layer " + std::to_string(index) + " ('" + layer.name + "')";
    for (const auto& tensor : layer.tensors) {
      if (tensor.shape.empty()) throw InputError(where + ": tensor '" + tensor.name + "' has an empty shape");
      for (auto extent : tensor.shape) {
        if (extent < 1) throw InputError(where + ": tensor '" + tensor.name + "' has a non-positive dimension");
      }
    }
    if (layer.tied_to_layer) {
      const auto target = *layer.tied_to_layer;
      if (target >= index || model.layers[target].tensors.empty()) {
        throw InputError(where + ": field 'tied_to': expected an earlier layer that owns parameters");
      }
      if (!layer.tensors.empty()) throw InputError(where + ": a tied layer must not list its own tensors");
    }
    // Note [Input limits]: a sample's tokens in the range of --seq-len, so micro-batch × tokens stays in 64 bits.
    if (layer.fixed_tokens_per_sample &&
        (*layer.fixed_tokens_per_sample < 1 || *layer.fixed_tokens_per_sample > limits::kMaxSeqLen)) {
      throw InputError(where + ": field 'tokens_per_sample': expected an integer from 1 to 16777216");
    }
    if (layer.flops.matmul_flops_per_token < 0 || layer.flops.attention_flops_per_token_per_position < 0 ||
        layer.activations.elements_per_token < 0) {
      throw InputError(where + ": FLOPs and activation sizes must be non-negative");
    }
  }
  if (model.param_count() < 1) throw InputError(origin + ": the model has no parameters");
}

}  // namespace shardplan
