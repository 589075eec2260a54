// The CPU runner's context parallelism: the CP group ring attention passes K/V around, and a CP rank's share of a
// micro-batch (Note [Context-parallel runner]).
#pragma once

#include <map>
#include <span>
#include <vector>

#include "communicator.h"
#include "ring_attention.h"
#include "runtime_types.h"

namespace shardplan::runner {

// Note [Context-parallel runner]: a plan with context_parallel.degree cp > 1 runs as torchtitan runs it (Note
// [Context-parallel lowering] in planner/context_parallel_lowering.h): the cp consecutive ranks of a CP group
// (mesh order [dp_shard, cp], Note [ParallelDims]) train on the same micro-batches — step() takes whole sequences
// and data_parallel_size() counts dp_shard ranks only — and each holds its load-balanced share of every sequence
// (chunks r and 2cp − 1 − r of 2cp, Note [Load-balanced positions] in executor/runtime/ring_attention.h): token ids,
// targets, and RoPE at the tokens' own positions. Everything but attention is per token and runs unchanged on the
// share; each decoder block's attention is ring attention over the CP group (Note [Ring attention core]), which
// posts exactly the ring steps the lowering emits as `send` ops (emit_ring_sends): per layer pass cp − 1 K/V steps
// forward (and again in a full recompute), cp − 1 K/V and cp dK/dV steps backward, each of K and V of the rank's
// micro_batch × seq/cp tokens (fp32 on CPU ranks, so dK/dV's fp32 is the same size). The program's send ops that
// name no peer stage (is_ring_step) are markers on the p2p stream — the exchanges happen inside the pass after them,
// in torch's order within the pass — and every step is one send and one receive, so a step's ring messages per rank
// are those send ops, calls and bytes, each way (StepReport::p2p); their receive buffers are tracked where the
// schedule places them (comm_buffers from a pass's first send op to its last), so the tracked memory is the
// program's. Each rank's loss is the mean over its tokens (equally many on every rank), so the agreed loss, the mean
// over ranks, is the whole sequences' mean; the gradient of every rank's loss reaches the keys' owners through the
// dK/dV ring, and FSDP's reduction over the dp_shard × cp ranks (the planner's shard group, the lowered schedule's
// collectives) averages it, as torchtitan's FSDP over "dp_shard_cp" does.
// With a pipeline each pipeline rank runs one CP rank's program of its stages (Note [Pipeline programs]): the ring
// inside its blocks, the stage boundaries carrying the CP rank's rows (Note [Pipeline runner]). With tensor
// parallelism (mesh [dp_shard, cp, tp]) the TP ranks of a CP rank split its share as they split a micro-batch (Note
// [Sequence-parallel tokens]), and each TP rank's ring carries its own heads among the CP ranks of its TP coordinate
// (Note [Sequence-parallel block]).
// Fine-tuning runs unchanged: the ring's blocks are the ordinary blocks' code, LoRA adapters and frozen tensors
// included (tests/mpi_runner/test_pipeline_finetune.cpp). Not executed (refused up front, one line each): CP on the GPU
// executor (check_executable in runner_support.cpp), and checkpoints of a CP run (`run`'s check_run_checkpoints in
// cli/cmd_run.cpp).

// The runner's CP group: ring steps as sends to rank + 1 and receives from rank − 1 on its CP communicator, waits that
// keep polling `progress` (so the asynchronous FSDP collectives move on, as CommTensorParallelGroup's do).
class CommContextParallelGroup final : public runtime::ContextParallelGroup {
 public:
  explicit CommContextParallelGroup(comm::Communicator& cp) : comm_(&cp) {}
  int degree() const override { return comm_->size(); }
  int rank() const override { return comm_->rank(); }
  int start_ring_step(std::span<const float> send, std::span<float> recv, Channel channel) override;
  void wait_ring_step(int id) override;
  void set_progress(runtime::ProgressPoll progress) { progress_ = std::move(progress); }

 private:
  struct Step {
    comm::CommHandle send, recv;
  };
  comm::Communicator* comm_;
  runtime::ProgressPoll progress_;
  std::map<int, Step> in_flight_;
  int next_id_ = 0;
};

// CP rank `rank`'s share of `batch` (whole sequences): each sequence's tokens and targets at
// load_balanced_positions, seq_len / degree of them. InputError when 2·degree does not divide seq_len.
runtime::Batch context_parallel_share(const runtime::Batch& batch, int degree, int rank);

}  // namespace shardplan::runner
