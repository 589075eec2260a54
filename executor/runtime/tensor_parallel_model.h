// Tensor parallelism's split of a llama model (Megatron-LM's column/row-parallel layers): which tensors a TP rank
// holds a slice of, the model one rank holds, and the copies between the whole model and one rank's slice.
#pragma once

#include <span>
#include <string_view>

#include "layer_kernel.h"
#include "model_spec.h"
#include "param_layout.h"

namespace shardplan::runtime {

// Note [Tensor-parallel split]: as Megatron-LM (Shoeybi et al. 2019, §3; Korthikanti et al. 2022, §4.2.2 for the
// sequence-parallel norms) and PyTorch's parallelize_module with ColwiseParallel/RowwiseParallel/SequenceParallel
// plan it for a llama block (torchtitan's apply_tp): q, k, v, gate and up are column-parallel — rank r holds rows
// [r·n/degree, (r+1)·n/degree) of the [out, in] weight (and of a bias), i.e. heads r·heads/degree.. of q and of the
// kv heads, and that slice of the FFN width; o and down are row-parallel — rank r holds the same slice of their input
// columns. Every other tensor (norm scales, embedding, final norm, lm_head) is replicated on every TP rank, and those
// layers run on the rank's share of the tokens (sequence parallelism), so their gradients are partial sums over the
// TP group. The runtime's embedding and head are replicated (not vocab-parallel and no loss parallel): their weights
// are whole on every rank.
enum class TensorParallelSplit { replicated, rows, columns };
TensorParallelSplit tensor_parallel_split(LayerKind kind, std::string_view tensor_name);

// `model` as one of `degree` TP ranks holds it: block tensors with their split dimension divided by `degree`; every
// other layer unchanged. The architecture (whole-model hyper-parameters) is kept. InputError naming the model when
// heads, kv heads or the FFN width do not divide by `degree`, or the model has no llama architecture.
ModelSpec tensor_parallel_rank_model(const ModelSpec& model, int degree);
// The kernel dimensions of one TP rank: heads, kv heads and FFN width divided by `degree`; head_dim and hidden_size
// unchanged.
DecoderDims tensor_parallel_dims(const DecoderDims& whole, int degree);

// Copies between a whole model's flat parameter (layout `whole`) and TP rank `rank`'s (layout `rank_layout`, from
// tensor_parallel_rank_model): extract writes every element of `rank_flat` from `whole_flat`; insert writes the
// elements rank `rank` holds into `whole_flat` (replicated tensors included: every rank holds the same values).
void extract_tensor_parallel_rank(const ModelLayout& whole, const ModelLayout& rank_layout, int degree, int rank,
                                  std::span<const float> whole_flat, std::span<float> rank_flat);
void insert_tensor_parallel_rank(const ModelLayout& whole, const ModelLayout& rank_layout, int degree, int rank,
                                 std::span<const float> rank_flat, std::span<float> whole_flat);

}  // namespace shardplan::runtime
