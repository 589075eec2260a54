// Tensor parallelism's split of a llama model for the CPU kernels: the model one TP rank holds (the cost model's),
// its kernel dimensions, and the copies between the whole model and one rank's slice.
#pragma once

#include <span>

#include "layer_kernel.h"
#include "model_spec.h"
#include "param_layout.h"

namespace shardplan::runtime {

// Note [Tensor-parallel split]: the split is the cost model's, costmodel/tensor_parallel.h (Note [Tensor
// parallelism]) in PyTorch's style (pytorch_tensor_parallel: torchtitan's apply_tp with sequence and loss parallel):
// q, k, v, gate and up are column-parallel — rank r holds rows [r·n/degree, (r+1)·n/degree) of the [out, in] weight
// (and of a bias), i.e. heads r·heads/degree.. of q and of the kv heads, and that slice of the FFN width; o and down
// are row-parallel — rank r holds the same slice of their input columns; the embedding and the lm_head are split over
// the vocabulary (rows [r·V/degree, ..)). The norm scales stay whole: those layers run on the rank's share of the
// tokens (sequence parallelism), so their gradients are partial sums over the TP group, which the cost model's
// backward lists as all-reduces (Note [Sequence-parallel parameter gradients]). The runtime reads the split from the
// rank model's shapes: a tensor whose rows differ from the whole model's is split by rows, whose columns differ by
// columns, and one of equal shape is whole.

// One of `degree` TP ranks' model: tensor_parallel_shard(model, pytorch_tensor_parallel(degree)), the model the
// planner lowers a 2-D plan for. InputError naming the model when the CPU kernels cannot run it or its heads, kv
// heads, FFN width or vocabulary do not divide by `degree` (the cost model's shapes round up; the kernels need exact
// slices).
ModelSpec tensor_parallel_rank_model(const ModelSpec& model, int degree);
// The kernel dimensions of one TP rank: heads, kv heads, FFN width and vocabulary divided by `degree`; head_dim and
// hidden_size unchanged. InputError as above.
DecoderDims tensor_parallel_dims(const DecoderDims& whole, int degree);

// Copies between a whole model's flat parameter (layout `whole`) and TP rank `rank`'s (layout `rank_layout`, from
// tensor_parallel_rank_model): extract writes every element of `rank_flat` from `whole_flat`; insert writes the
// elements rank `rank` holds into `whole_flat` (replicated tensors included: every rank holds the same values).
void extract_tensor_parallel_rank(const ModelLayout& whole, const ModelLayout& rank_layout, int degree, int rank,
                                  std::span<const float> whole_flat, std::span<float> rank_flat);
void insert_tensor_parallel_rank(const ModelLayout& whole, const ModelLayout& rank_layout, int degree, int rank,
                                 std::span<const float> rank_flat, std::span<float> whole_flat);

}  // namespace shardplan::runtime
