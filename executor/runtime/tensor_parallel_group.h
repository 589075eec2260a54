// TensorParallelGroup: the collectives a tensor-parallel layer kernel runs on its TP group, and the TP layer factory.
#pragma once

#include <memory>
#include <span>

#include "attention.h"
#include "layer_kernel.h"

namespace shardplan::runtime {

class ContextParallelGroup;  // ring_attention.h

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
  // buffer[i] = max_r buffer_of_rank_r[i], in place.
  virtual void all_reduce_max(std::span<float> buffer) = 0;
};

// Note [Sequence-parallel tokens]: a TP group's ranks share one micro-batch of `whole` = micro_batch × seq_len
// tokens; rank r holds the contiguous r-th of its flattened [micro_batch × seq_len] token rows (so an all-gather of
// the ranks' rows is the micro-batch in order). Outside the attention and MLP GEMMs everything is per token (norms,
// residuals, embedding, loss; RoPE's positions are applied inside attention, on the gathered sequence), so the
// replicated layers run unchanged on a "batch" of one sequence of whole.tokens()/degree tokens. That batch's ids are
// the whole micro-batch's (Batch::group_degree): the vocabulary-parallel embedding and loss read every token's.

// Kernel for layer `index` of `rank_model` (tensor_parallel_rank_model) on a TP group: a sequence-parallel decoder
// block for transformer blocks (Note [Sequence-parallel block]), the vocabulary-parallel embedding and loss-parallel
// head (Note [Vocabulary-parallel layers]), the ordinary kernel on the sequence shard for the final norm. Each runs
// the collectives the cost model lists in the layer's kernel spec (tp_forward, tp_backward; the parameter-gradient
// all-reduces are the executor's, after the backward). `group` must outlive the kernel. InputError as
// make_layer_kernel. With a CP `ring` (context parallelism beside TP) `whole` is the TP group's share of the
// micro-batch, one CP rank's rows of each sequence, and a block's attention core runs over the ring (Note
// [Sequence-parallel block]); `ring` must outlive the kernel too.
std::unique_ptr<LayerKernel> make_tensor_parallel_layer_kernel(const ModelSpec& rank_model, std::size_t index,
                                                               const AttentionShape& whole,
                                                               TensorParallelGroup& group,
                                                               ContextParallelGroup* ring = nullptr);

// The TP kernels for one TP rank's dimensions (tensor_parallel_dims): decoder_block.cpp and
// tensor_parallel_vocab.cpp.
std::unique_ptr<LayerKernel> make_sequence_parallel_block(const DecoderDims& rank_dims, const AttentionShape& whole,
                                                          TensorParallelGroup& group,
                                                          ContextParallelGroup* ring = nullptr);
std::unique_ptr<LayerKernel> make_vocab_parallel_embedding(const DecoderDims& rank_dims, TensorParallelGroup& group);
std::unique_ptr<LayerKernel> make_loss_parallel_head(const DecoderDims& rank_dims, TensorParallelGroup& group);

}  // namespace shardplan::runtime
