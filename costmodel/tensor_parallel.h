// Tensor parallelism (Megatron-style, as PyTorch's parallelize_module applies it): one TP rank's view of a model.
#pragma once

#include <string>

#include "model_spec.h"

namespace shardplan {

// Note [Tensor parallelism]: torchtitan's Llama plan (torchtitan/models/llama3/infra/parallelize.py apply_tp, after
// Megatron-LM: Shoeybi et al. 2019, Korthikanti et al. 2022 "Reducing Activation Recomputation in Large Transformer
// Models") on a TP group of t ranks inside a node:
// - q/k/v, gate/up (GPT-2: c_attn, c_fc) are ColwiseParallel (output features split t ways), o_proj/down_proj
//   (c_proj) RowwiseParallel (input features split); attention runs on heads / t heads. Weights, GEMMs and the
//   activations between the two projections of each pair are divided by t.
// - With sequence parallelism (SequenceParallel on the norms, the residual stream sharded on the sequence dimension)
//   the norms, residual adds and dropouts work on s/t of the tokens; each column-parallel pair's input is all-gathered
//   and each row-parallel output reduce-scattered (2 all-gathers + 2 reduce-scatters of s·b·h per block forward, the
//   conjugates in backward: Korthikanti §4.2.2, the same bus bytes as the 2 + 2 all-reduces of TP without it).
// - The embedding is RowwiseParallel (vocabulary split; its partial output reduce-scattered onto the sequence
//   shards), the output head ColwiseParallel with loss parallel (logits stay split over the vocabulary, the
//   cross-entropy runs on V/t columns, its input all-gathered, three fp32 statistics per token all-reduced), the
//   final norm SequenceParallel. Each tensor left whole on a sequence-sharded layer has its gradient all-reduced over
//   the TP group in backward (Note [Sequence-parallel parameter gradients] in tensor_parallel.cpp).
// What autograd keeps: PyTorch's DTensor saves the all-gathered input of each column-parallel projection (the
// linear's saved input is the redistributed tensor), so 2 of the block's tensors of h per token are kept whole;
// Megatron-LM's sequence parallelism keeps the shard and all-gathers it again in backward (Korthikanti §4.2.3), which
// gives Table 2's sbh(34/t + 5as/(ht)). TensorParallelStyle chooses between them; exports and runners use PyTorch's.
struct TensorParallelStyle {
  int degree = 1;
  bool sequence_parallel = true;
  bool keeps_gathered_inputs = true;  // PyTorch DTensor: true; Megatron-LM sequence parallelism: false
};

// PyTorch's tensor parallelism as torchtitan applies it: sequence parallel, DTensor's saved gathered inputs, loss
// parallel. The style the planner's 2-D plans, the exports and the CPU executor use.
TensorParallelStyle pytorch_tensor_parallel(int degree);

// One TP rank's model: every layer's parameters, FLOPs, kernels and kept activations as that rank holds and runs
// them, with the TP collectives of each pass in its kernel spec (Note [Tensor-parallel collectives] in
// kernel_spec.h). The model must have an architecture (validate_tensor_parallel_degree in planner/plan.h checks the
// user's degree); InternalError otherwise. degree 1 returns the model unchanged.
ModelSpec tensor_parallel_shard(const ModelSpec& model, const TensorParallelStyle& style);

}  // namespace shardplan
