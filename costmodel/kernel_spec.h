// LayerKernelSpec: the kernels one layer's forward launches as PyTorch eager runs it — its projections (GEMMs), its
// attention core and its memory-bound kernels — from which pass_kernels.h builds each pass of the op-level model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardplan {

// y = x·Wᵀ (nn.Linear, HF Conv1D): forward is one GEMM of tokens × out_features × in_features; backward two of the
// same FLOPs (input gradient and weight gradient, Narayanan et al. 2021 §5.1).
struct ProjectionSpec {
  std::string name;  // "q_proj", "c_attn": the module's name in the reference implementation
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  // torchtitan's selective-op checkpointing saves the output of every other matmul of the forward (the 1st, 3rd, ...:
  // `mm_count % 2 == 0` is recomputed) and recomputes the rest (Note [Selective-op checkpointing] in pass_kernels.h).
  bool saved_by_op_policy = false;
  // Fine-tuning (costmodel/finetune_apply.h): a frozen weight's backward runs the input-gradient GEMM only; a
  // quantised one (QLoRA) is dequantised before each GEMM that reads it; a LoRA target adds its adapter's GEMMs.
  // (Kept within the spec's size before them: explicit model files derive one spec per square GEMM of their FLOPs.)
  bool frozen_weight = false;
  bool quantized = false;
  bool lora_dropout = false;   // the adapter's input goes through nn.Dropout (lora_dropout > 0)
  std::int32_t lora_rank = 0;  // 0: no adapter (LoraSettings caps r at 2^20)
  bool operator==(const ProjectionSpec&) const = default;
};

// softmax(QKᵀ/√d)·V over `heads` query heads of `head_dim` (grouped-query attention shares K and V among heads but
// does the same FLOPs per query head).
struct AttentionSpec {
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  bool causal = true;
  std::int64_t window = 0;  // Note [Sliding-window attention]: each query attends to the last `window` keys; 0: all
  bool chunked = false;     // Note [Chunked attention]: `window` is a chunk each query attends within instead
  bool operator==(const AttentionSpec&) const = default;
};

// Note [Sliding-window attention]: the share of the s × s score matrix a kernel that skips masked blocks computes.
// Causal: half (FlashAttention-2 §3.1). With a window w < s (Mistral, StarCoder2, gpt-oss, Phi-3, Gemma 2/3's local
// layers, Qwen2 / Qwen3 with use_sliding_window; FlashAttention ≥ 2.3's window_size, which skips the blocks outside
// it), query i attends to min(i + 1, w) keys: Σ min(i + 1, w) over the s queries is w·s − w(w − 1)/2 ≈ w·s − w²/2,
// a share w/s − w²/(2s²) of s². Kernels that materialise the scores (eager) compute the whole matrix and mask it,
// whatever the window. What a windowed layer keeps for backward is the same as a full one's: a flash kernel keeps its
// output and one log-sum-exp per query and head whatever the window, and eager attention (transformers'
// eager_attention_forward adds the sliding mask to the s × s scores) keeps all s² of them.
// Not causal (an encoder), a window is a block of `window` consecutive tokens attending among themselves
// (Qwen2.5-VL's windowed vision blocks: flash_attn_varlen over cu_window_seqlens): s/w windows of w² scores, a share
// w/s of s².
// Note [Chunked attention]: Llama 4's local layers (layer_types "chunked_attention", its RoPE layers) attend within
// chunks of c = attention_chunk_size positions: transformers' chunked_overlay (masking_utils.py) lets query i see key
// j when j <= i and j // c == i // c (create_chunked_causal_mask, modeling_llama4.py). Each whole chunk is a causal
// c × c block, so a kernel that skips masked blocks (as for a window) computes, for s = k·c + r, k chunks of c²/2 and
// a last one of r²/2, counted as the causal half is (s²/2 for s(s + 1)/2): a share (k·c² + r²)/(2s²) of s², ½ when
// c ≥ s. What the layer keeps for backward does not change, as for a window.
inline double masked_attention_share(std::int64_t seq_len, std::int64_t window, bool causal, bool chunked = false) {
  if (causal && chunked && window > 0 && window < seq_len) {
    const double c = static_cast<double>(window), s = static_cast<double>(seq_len);
    const double chunks = static_cast<double>(seq_len / window), rest = static_cast<double>(seq_len % window);
    return (chunks * c * c + rest * rest) / (2.0 * s * s);
  }
  if (!causal) {
    return window > 0 && window < seq_len ? static_cast<double>(window) / static_cast<double>(seq_len) : 1.0;
  }
  if (window <= 0 || window >= seq_len) return 0.5;
  const double w = static_cast<double>(window), s = static_cast<double>(seq_len);
  return w / s - w * w / (2.0 * s * s);
}

// A family of memory-bound kernels (a norm, a residual add, RoPE, an activation function, the loss): the elements per
// token they read plus write in the activation dtype and in fp32, one-byte elements (dropout masks), and how many
// kernels that takes, for forward and backward. Bytes per token = act_elements × activation bytes + fp32_elements × 4 +
// byte_elements.
struct ElementwiseTraffic {
  double act_elements = 0;
  double fp32_elements = 0;
  double byte_elements = 0;
  int kernels = 0;
  bool operator==(const ElementwiseTraffic&) const = default;
};
struct ElementwiseSpec {
  std::string name;
  ElementwiseTraffic forward;
  ElementwiseTraffic backward;
  // Recomputed by torchtitan's selective-op policy (everything but the saved ops up to the last tensor backward needs;
  // the block's final residual add is not recomputed: torch.utils.checkpoint stops early once backward has what it
  // needs).
  bool recomputed_by_op_policy = true;
  bool operator==(const ElementwiseSpec&) const = default;
};

// Note [Tensor-parallel collectives]: under tensor parallelism (costmodel/tensor_parallel.h) a layer's passes run
// collectives over the activations inside the pass, on the compute stream's critical path: PyTorch's
// parallelize_module inserts them in the modules' forward hooks (DTensor redistribute), and the next kernel waits for
// their output. Each is one full activation tensor of `elements_per_token` per token in nccl-tests' S convention
// (the gathered output of an all-gather, the input of a reduce-scatter), over the layer's TP group of one node, or a
// fixed number of elements (a replicated parameter's gradient). The CPU executor runs exactly these, in this order
// (executor/runtime/tensor_parallel_group.h), and its counts per step are checked against the schedule's.
enum class ActivationCollective { all_gather, reduce_scatter, all_reduce };
struct ActivationCollectiveSpec {
  ActivationCollective kind = ActivationCollective::all_gather;
  double elements_per_token = 0;
  // Elements moved whatever the tokens: a parameter's gradient summed over the TP group (`gradient_of` names it).
  double elements = 0;
  std::string gradient_of;
  // Moved in fp32 whatever the compute dtype (loss parallel's statistics: torchtitan casts the logits to float).
  bool fp32 = false;
  // Rerun by a recompute pass: full recompute reruns every forward collective; torchtitan's selective-op policy
  // saves reduce_scatter_tensor's output (its _save_list) and reruns the all-gathers.
  bool recomputed_by_op_policy = true;
  bool operator==(const ActivationCollectiveSpec&) const = default;
};

struct LayerKernelSpec {
  std::vector<ProjectionSpec> projections;  // in forward order (the order torchtitan's policy counts matmuls in)
  std::optional<AttentionSpec> attention;
  std::vector<ElementwiseSpec> elementwise;
  // A lookup (nn.Embedding): no GEMM; its backward scatter-adds the token gradients into the weight gradient.
  bool embedding_lookup = false;
  // Tensor parallelism (Note [Tensor-parallel collectives]): the degree the shapes above are already divided by, and
  // the collectives of the forward and of the backward, in order. Derived, never chosen here: tensor_parallel_shard
  // sets it from its style, which planner/tensor_parallel_view.cpp (data_parallel_model) makes from the world's
  // ParallelDims::tp() (Note [ParallelDims] in parallel_dims.h); the compute and collective costs of a layer read it
  // from its kernels, which carry no ParallelDims.
  int tensor_parallel_degree = 1;
  std::vector<ActivationCollectiveSpec> tp_forward;
  std::vector<ActivationCollectiveSpec> tp_backward;
  bool operator==(const LayerKernelSpec&) const = default;
};

}  // namespace shardplan
