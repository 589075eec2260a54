// PassKernels: the kernels one pass (forward, backward, recompute) of one layer launches for one micro-batch — GEMMs
// with their shapes, the attention core, memory-bound traffic — built from the layer's LayerKernelSpec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model_spec.h"
#include "training.h"

namespace shardplan {

// backward_input and backward_weight split backward for the zero-bubble pipeline schedules (Note [Split backward]).
enum class ComputePass { forward, backward, recompute, backward_input, backward_weight };
inline constexpr std::size_t kComputePasses = 5;

// C[m×n] = A[m×k]·B[k×n] for `batch` independent matrices in one kernel (a batched GEMM: eager attention's scores
// over sequences × heads).
struct GemmCall {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  double batch = 1;
  bool fp8 = false;      // a float8 GEMM (Note [Float8 training] in precision.h): at the fp8 tensor rate
  double flops() const;  // 2·m·n·k per matrix (one multiply-add = 2 FLOPs)
  bool operator==(const GemmCall&) const = default;
};

// A fused attention kernel (FlashAttention / SDPA's flash backend) over one micro-batch. FLOPs in the FlashAttention
// papers' convention, so their measured rates apply: forward 4·s²·d·heads per sequence, halved with a causal mask;
// backward 2.5× forward (FlashAttention-2 §4.1: "2 matmuls in the forward pass and 5 matmuls in the backward pass").
struct AttentionCall {
  double flops = 0;
  std::int64_t seq_len = 0;
  std::int64_t head_dim = 0;
  bool backward = false;
  bool triton = false;  // the Triton FlashAttention kernel (TrainingConfig::attention_kernel), at its own rate
  bool operator==(const AttentionCall&) const = default;
};

// One collective over activations inside a pass (Note [Tensor-parallel collectives] in kernel_spec.h): S bytes in
// nccl-tests' convention over `ranks` ranks of one node.
struct ActivationCollectiveCall {
  ActivationCollective kind = ActivationCollective::all_gather;
  std::int64_t bytes = 0;
  int ranks = 1;
  bool operator==(const ActivationCollectiveCall&) const = default;
};

struct PassKernels {
  std::vector<GemmCall> gemms;
  std::vector<ActivationCollectiveCall> collectives;  // tensor parallelism's, on the compute stream
  std::vector<AttentionCall> attention;  // flash kernels; the eager (math) path is GEMMs and softmax traffic instead
  double memory_bytes = 0;               // HBM traffic of the memory-bound kernels
  double memory_kernels = 0;             // how many memory-bound kernels that is
  double flops() const;                  // GEMM + attention FLOPs (what the pass does on the hardware)
  double gemm_flops() const;
  double attention_flops() const;
  double kernel_count() const;           // GEMMs + attention kernels + collectives + memory-bound kernels
  bool empty() const {
    return gemms.empty() && attention.empty() && collectives.empty() && memory_bytes == 0 && memory_kernels == 0;
  }
  bool operator==(const PassKernels&) const = default;
};

// Note [Selective-op checkpointing]: torchtitan's default selective activation checkpointing (`mode = "selective"`,
// `selective_ac_option = "op"`, torchtitan/models/llama3/infra/parallelize.py `_save_list` and `_custom_policy`)
// saves the outputs of every other matmul (aten.mm, counted in forward order; the 2nd, 4th, ... are recomputed) and of
// SDPA, and recomputes every other op. The backward pass then reruns, before the layer's backward, the block's forward
// but the saved matmuls and attention — up to the last tensor backward needs (torch.utils.checkpoint stops its
// recompute early), so the final residual add is not rerun. Kept per token: the block input, the saved matmuls'
// outputs, and attention's output and log-sum-exp (ActivationFootprint::selective_op_elements_per_token).

// Note [Split backward]: torch.distributed.pipelining's zero-bubble schedules run a stage's backward in two parts
// (torch/distributed/pipelining/_backward.py): stage_backward_input, the gradients of the stage's inputs, and later
// stage_backward_weight, the weights' gradients from the output gradients it kept (Qi et al., "Zero Bubble Pipeline
// Parallelism", arXiv:2401.10241, §2: B and W). backward_weight is each trainable weight's dW = dYᵀ·X GEMM (and
// LoRA's adapter weight gradients); backward_input is everything else backward launches — dX GEMMs, attention,
// elementwise gradients, the float8 casts of dY, tensor parallelism's collectives. The two sum to backward.

// The kernels of `pass` of model.layers[layer_index] for one micro-batch of `training`. `checkpointing` is the layer's
// mode: it decides what a recompute pass reruns (full: the whole forward; selective: the attention core when the
// scores are materialised, nothing with flash kernels, whose backward recomputes them anyway; selective_op: Note
// [Selective-op checkpointing]; none: nothing). Layers given without a kernel spec (explicit model files) get one
// derived from their FLOPs and activation sizes (Note [Derived kernels] in pass_kernels.cpp).
PassKernels pass_kernels(const ModelSpec& model, std::size_t layer_index, const TrainingConfig& training,
                         ComputePass pass, ActivationCheckpointing checkpointing);

// Note [Float8 training] (precision.h): whether a projection of `layer` runs in float8 — a transformer block's
// nn.Linear (the output head, embeddings and norms stay bf16, torchtitan filter_fqns = ["output"]) whose features are
// multiples of 16 (torchao's requirement for torch._scaled_mm), untouched by fine-tuning.
bool runs_in_fp8(const LayerSpec& layer, const ProjectionSpec& projection);
// The parameter elements of `layer` a float8 all-gather moves in 1 byte: its fp8 projections' weights.
std::int64_t fp8_weight_elements(const LayerSpec& layer);

// The spec pass_kernels uses for a layer: its own, or the derived one.
LayerKernelSpec effective_kernel_spec(const ModelSpec& model, const LayerSpec& layer);

}  // namespace shardplan
