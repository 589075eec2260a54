// The CPU runner's tensor parallelism: the TP group the kernels call, each TP rank's share of a micro-batch, the sum
// of replicated parameters' gradients over the TP group, and the collectives one step's passes run.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "comm_counters.h"
#include "communicator.h"
#include "model_spec.h"
#include "param_layout.h"
#include "runtime_types.h"
#include "schedule.h"
#include "tensor_parallel_group.h"

namespace shardplan::runner {

// Note [2-D mesh]: a run of tensor-parallel degree tp on W ranks is a (W/tp) × tp mesh with TP inner, as torchtitan's
// init_device_mesh(("dp_shard", "tp")) lays it out (TP over the fastest-varying, intra-node ranks): world rank w is TP
// rank w mod tp of the TP group {w - w mod tp, ..., +tp-1} and data-parallel rank w / tp of the DP group of ranks
// ≡ w (mod tp). TP 2 × FSDP 2 on 4 ranks: TP groups {0,1} {2,3}, DP groups {0,2} {1,3}. The ranks of a TP group train
// on the same micro-batches; the schedule (lowered for W/tp data-parallel ranks and the TP rank's model,
// tensor_parallel_rank_model) runs inside the DP group: FSDP shards each TP rank's parameters over it.

// The runner's TP group: blocking collectives on its TP communicator that keep polling `progress` while they wait,
// so the runner's asynchronous FSDP collectives still move on and parked ones are issued (Note [Runner streams]);
// a plain wait could leave a DP peer blocked on a collective this rank has parked, while that peer's TP partner
// waits for it.
class CommTensorParallelGroup final : public runtime::TensorParallelGroup {
 public:
  explicit CommTensorParallelGroup(comm::Communicator& tp) : comm_(&tp) {}
  int degree() const override { return comm_->size(); }
  int rank() const override { return comm_->rank(); }
  void all_gather(std::span<const float> local, std::span<float> whole) override;
  void reduce_scatter(std::span<const float> whole, std::span<float> local) override;
  void all_reduce(std::span<float> buffer) override;
  void all_reduce_max(std::span<float> buffer) override;
  void set_progress(runtime::ProgressPoll progress) { progress_ = std::move(progress); }

 private:
  void wait(comm::CommHandle handle);
  comm::Communicator* comm_;
  runtime::ProgressPoll progress_;
};

// A TP rank's share of `batch` (Note [Sequence-parallel tokens]): one sequence of whole / degree token rows (the
// rank's rows of the activations), with the whole micro-batch's ids (Batch::group_degree).
runtime::Batch sequence_parallel_share(const runtime::Batch& batch, int degree);

// Note [Replicated gradients]: a tensor the TP split leaves whole on a sequence-sharded layer (the norm scales: Note
// [Tensor-parallel split]) is used by every TP rank on its own tokens, so each rank's backward adds only its share of
// the gradient. The cost model lists their sums as all-reduces at the end of the layer's backward, one per tensor
// (`gradient_of` in the rank model's tp_backward, Note [Sequence-parallel parameter gradients] in
// costmodel/tensor_parallel.cpp); the runner runs exactly those, in that order on every TP rank: what this backward
// added to each is all-reduced over the TP group and added back. The sums then go through FSDP's reduction over the
// DP group as every other gradient does.
class ReplicatedGradients {
 public:
  // Before the layer's backward: keeps and zeroes the gradients `rank_layer`'s tp_backward sums (`grads`: the
  // layer's gradient view; a tied layer's are its owner's, whose gradients the owner's own backward sums).
  ReplicatedGradients(const runtime::LayerParams& grads, const LayerSpec& rank_layer);
  // After it: each delta summed over `group`, plus what was kept.
  void sum_over(runtime::TensorParallelGroup& group);

 private:
  std::vector<runtime::BoundTensor> tensors_;
  std::vector<std::vector<float>> kept_;
};

// The collectives the passes of `schedule` run inside its forward, recompute and backward ops (the TP collectives in
// each op's kernels, Note [Tensor-parallel collectives] in costmodel/kernel_spec.h), counted as CommCounters counts
// them: calls, and S bytes in nccl-tests' convention.
comm::CommCounters expected_pass_collectives(const StepSchedule& schedule);

}  // namespace shardplan::runner
