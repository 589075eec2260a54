// The CPU runner's tensor parallelism: the TP group the kernels call, each TP rank's share of a micro-batch, the sum
// of replicated parameters' gradients over the TP group, and the TP collectives one step runs.
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
  void set_progress(runtime::ProgressPoll progress) { progress_ = std::move(progress); }

 private:
  void wait(comm::CommHandle handle);
  comm::Communicator* comm_;
  runtime::ProgressPoll progress_;
};

// TP rank `rank`'s share of `batch` (Note [Sequence-parallel tokens]): one sequence of its token rows.
runtime::Batch sequence_parallel_share(const runtime::Batch& batch, int degree, int rank);

// Note [Replicated gradients]: a replicated parameter (norm scales, embedding, final norm, lm_head: Note
// [Tensor-parallel split]) is used by every TP rank on its own tokens, so each rank's backward adds only its share of
// the gradient; Megatron sums them over the TP group for sequence-parallel norms (its all-reduce of layernorm grads)
// and DTensor does it for a Replicate parameter whose gradient is Partial. Here the sum runs inside each backward
// op, in layer order on every TP rank (so the TP communicator sees one order): what this backward added to the
// layer's replicated gradients is all-reduced over the TP group and added back, one all-reduce per backward op. The
// sum then goes through FSDP's reduction over the DP group as every other gradient does.
class ReplicatedGradients {
 public:
  // Before the layer's backward: keeps and zeroes the replicated tensors of `grads` (the layer's gradient view).
  ReplicatedGradients(const runtime::LayerParams& grads, LayerKind kind);
  // After it: the deltas summed over `group`, plus what was kept.
  void sum_over(runtime::TensorParallelGroup& group);
  std::int64_t elements() const { return static_cast<std::int64_t>(kept_.size()); }

 private:
  std::vector<runtime::BoundTensor> tensors_;
  std::vector<float> kept_;
};

// The TP collectives one step of `schedule` runs on each rank (model: the TP rank's model the schedule was lowered
// for; whole_tokens: tokens of one micro-batch): per forward, recompute and backward op of a transformer block
// kTensorParallelBlockPass's all-gathers and reduce-scatters of whole_tokens × hidden fp32, and per backward op of a
// layer with replicated tensors one all-reduce of them (Note [Replicated gradients]). Bytes follow CommCounters.
comm::CommCounters tensor_parallel_collectives(const StepSchedule& schedule, const ModelSpec& model,
                                               std::int64_t whole_tokens);

}  // namespace shardplan::runner
