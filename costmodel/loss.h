// LossKind: how the output head's cross-entropy runs (plain, torchtune's chunked output loss, Liger's fused linear
// cross-entropy), and the output head it gives a model — what the loss keeps for backward, its workspaces, its kernels.
#pragma once

#include <string>

#include "model_spec.h"

namespace shardplan {

// Note [Fine-tuning losses]: the loss over the vocabulary, as fine-tuning recipes run it. Plain cross_entropy is HF's
// ForCausalLMLoss / torchtitan's cross_entropy_loss (decoder_builder.cpp lm_head: the logits upcast to fp32 whole).
//
// chunked_ce — torchtune's CEWithChunkedOutputLoss(num_output_chunks=8) (torchtune/modules/loss/
// ce_chunked_output_loss.py): the logits are split into 8 chunks along the tokens and compute_cross_entropy runs
// F.cross_entropy(logits_chunk.float(), ...) on one chunk at a time. Autograd keeps each chunk's log_softmax output
// (fp32; LogSoftmaxBackward saves its result), so what is kept for backward is the plain loss's — 8 tensors of V/8
// per token instead of one of V; what shrinks is the transient: the fp32 upcast beside log_softmax's output (forward)
// and nll_loss's and log_softmax's fp32 gradients (backward) exist for one chunk at a time, 1/8 of the plain loss's.
// Time: the same traffic, each of the 3 loss kernels launched once per chunk (8×).
//
// linear_ce — Liger's LigerFusedLinearCrossEntropyLoss (liger_kernel/ops/fused_linear_cross_entropy.py,
// fused_linear_cross_entropy_forward): the output projection and the loss fused, the logits never materialised
// beyond one chunk of tokens. chunk_size = next_power_of_2(ceil(BT / ceil(V / H))), the source's budget of "C × BT ×
// H" transient logits with C = 1 (_CHUNK_MEM_CONST): H logits per token in the activation dtype (the power-of-two
// rounding can double it; not modelled). Its forward writes the loss gradient into the chunk in place
// (liger_cross_entropy_kernel, HAS_GRADIENTS) and computes grad_input (BT × H) and grad_weight (V × H, the weight's
// dtype) there; it saves those two for backward, which only scales them (element_mul_kernel, skipped when the
// upstream gradient is 1). Kept per token: grad_input, H elements — no logits, no fp32 copy. grad_weight is the head's
// unsharded gradient, which FSDP allocates in the head's backward anyway, right after (the head is the last layer),
// so it is not counted again. No backward workspace. Time: the same GEMM FLOPs (logits, grad_input and grad_weight:
// 1 forward + 2 backward matmuls, all run in the forward), the loss one kernel per chunk reading the logits twice
// (max and sum-exp, then the gradient) and writing them once, in the activation dtype (the kernel computes in fp32
// registers).
enum class LossKind { cross_entropy, chunked_ce, linear_ce };

// "cross-entropy" | "chunked-ce" | "linear-ce"; InputError naming --loss with the closest name when unknown.
LossKind loss_from_string(const std::string& text);
const char* to_string(LossKind loss);

// torchtune's CEWithChunkedOutputLoss default (num_output_chunks: int = 8).
inline constexpr int kChunkedOutputLossChunks = 8;

// `model` with its output heads (LayerKind::lm_head) rewritten for `loss` (Note [Fine-tuning losses]); the model
// itself for cross_entropy. A head without a kernel description (explicit model files) keeps its measured footprint.
ModelSpec model_for_loss(const ModelSpec& model, LossKind loss);

}  // namespace shardplan
