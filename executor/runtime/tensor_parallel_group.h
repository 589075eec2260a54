// TensorParallelGroup: the collectives a tensor-parallel layer kernel runs on its TP group, and the TP layer factory.
#pragma once

#include <memory>
#include <span>

#include "attention.h"
#include "layer_kernel.h"

namespace shardplan::runtime {

// The runtime knows no communicator (executor/comm); an executor implements this over its TP group. Every call
// blocks until it completed on this rank and runs on every rank of the group in the same order: the kernels call
// them at fixed points of their passes (Note [Sequence-parallel block]).
class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int degree() const = 0;
  virtual int rank() const = 0;
  // whole[r·local.size() + i] = local_of_rank_r[i].
  virtual void all_gather(std::span<const float> local, std::span<float> whole) = 0;
  // local[i] = Σ_r whole_of_rank_r[rank()·local.size() + i].
  virtual void reduce_scatter(std::span<const float> whole, std::span<float> local) = 0;
  // buffer[i] = Σ_r buffer_of_rank_r[i], in place.
  virtual void all_reduce(std::span<float> buffer) = 0;
};

// Note [Sequence-parallel tokens]: a TP group's ranks share one micro-batch of `whole` = micro_batch × seq_len
// tokens; rank r holds the contiguous r-th of its flattened [micro_batch × seq_len] token rows (so an all-gather of
// the ranks' rows is the micro-batch in order). Outside the attention and MLP GEMMs everything is per token (norms,
// residuals, embedding, loss; RoPE's positions are applied inside attention, on the gathered sequence), so the
// replicated layers run unchanged on a "batch" of one sequence of whole.tokens()/degree tokens.

// Kernel for layer `index` of `rank_model` (tensor_parallel_rank_model) on a TP group: a sequence-parallel decoder
// block for transformer blocks (Note [Sequence-parallel block]), the ordinary kernel for every other layer (their
// tensors are replicated). `group` must outlive the kernel. InputError as make_layer_kernel.
std::unique_ptr<LayerKernel> make_tensor_parallel_layer_kernel(const ModelSpec& rank_model, std::size_t index,
                                                               const AttentionShape& whole,
                                                               TensorParallelGroup& group);

// The sequence-parallel decoder block (tensor_parallel_block.cpp) for one TP rank's dimensions (tensor_parallel_dims).
std::unique_ptr<LayerKernel> make_sequence_parallel_block(const DecoderDims& rank_dims, const AttentionShape& whole,
                                                          TensorParallelGroup& group);

// The TP collectives one pass (a forward, a recompute or a backward) of one sequence-parallel decoder block runs.
struct TensorParallelPassCollectives {
  int all_gathers = 2;       // before the column-parallel q/k/v and gate/up GEMMs (forward); of dL/dy (backward)
  int reduce_scatters = 2;   // after the row-parallel o and down GEMMs (forward); of dL/dx partials (backward)
};
inline constexpr TensorParallelPassCollectives kTensorParallelBlockPass{};

}  // namespace shardplan::runtime
