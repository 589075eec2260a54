// What a torch.compile'd llama block keeps for backward that eager keeps too, and what it does not (Note [Compiled
// blocks]).
#pragma once

#include "kernel_spec.h"
#include "model_spec.h"

namespace shardplan {

// Note [Compiled blocks]: torchtitan compiles each TransformerBlock (torchtitan/parallelisms/parallelize_llama.py
// apply_compile, after apply_ac wrapped it). AOTAutograd traces forward and backward into one joint graph and
// min_cut_rematerialization_partition (torch/_functorch/partitioners.py) picks the tensors the forward graph hands the
// backward graph: the cheapest cut between the graph inputs and the backward's needs, where
// - matmuls and SDPA are compute-intensive, never recomputed (should_ban_recomputation: not in the recomputable
//   allowlist, get_default_op_list's compute_intensive_ops);
// - a pointwise node that a non-fusible backward op reads (a matmul's weight gradient reads its input, SDPA's backward
//   its q, k, v and output) is banned from recomputation too (ban_recompute_materialized_backward, on by default:
//   "if a node must be materialized in the backwards pass, then recomputing it is never free"), so it is saved;
// - a reduction whose output is 4× smaller than its input is not recomputed (ban_recompute_reductions): RMSNorm's
//   per-row statistic is saved (one fp32 value per row, not counted, as in Note [Elementwise traffic]);
// - any other pointwise node is recomputed inside the fused backward kernel when that makes the cut smaller.
// For the llama block (block_kernels.cpp llama_block_kernels) the norms' outputs feed q/k/v and gate/up, the RoPE'd q
// and k and v feed SDPA, silu(gate)·up feeds down_proj: all are kept, as eager keeps them. The one tensor eager keeps
// and the compiled block recomputes is the MLP activation's output, silu(gate) (GeGLU: gelu(gate)): only the mul's
// backward reads it, a fusible op, and it is rebuilt from the saved gate output (f elements per token).
// Under torchtitan's selective-op policy (Note [Selective-op checkpointing] in pass_kernels.h) the tags decide:
// PREFER_RECOMPUTE nodes are recomputed (partitioners.py must_recompute), MUST_SAVE ones (the policy's matmuls and
// SDPA) are banned from recomputation — but saved only when a backward node needs them, since only nodes on a path to
// the backward are cut. Eager's checkpoint caches every MUST_SAVE output whether or not backward reads it
// (torch/utils/checkpoint.py _CachingTorchDispatchMode: policy MUST_SAVE appends the op's outputs to its storage). So
// where the block's last matmul is saved by the policy and its output only reaches the residual add (whose backward
// reads nothing), eager keeps it and the compiled block does not: Llama's down_proj (7th matmul), h per token.
struct CompiledBlockSavings {
  // Of ActivationFootprint::elements_per_token (no checkpointing): what the compiled block recomputes in backward.
  double recomputed_elements_per_token = 0;
  // Of ActivationFootprint::selective_op_elements_per_token: the saved matmul outputs no backward node reads.
  double unread_selective_op_elements_per_token = 0;
};

// The llama block of `arch` with its kernel spec `spec` (llama_block_kernels(arch)).
CompiledBlockSavings compiled_llama_block_savings(const DecoderArchitecture& arch, const LayerKernelSpec& spec);

}  // namespace shardplan
