// StepSchedule: the IR of one training step — ordered ops per stream with dependencies and memory effects.
// The simulator times these ops; the executor runs exactly these ops. Plain data: no planner logic needed to read it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compact_vector.h"
#include "memory_category.h"
#include "model_spec.h"
#include "parallel_dims.h"
#include "pass_kernels.h"

namespace shardplan {

struct MemoryEffects;  // memory_effects.h

// all_to_all: expert parallelism's dispatch and combine (Note [Expert parallelism] in unit_layout.h). p2p: a pipeline
// stage's sends to its neighbour stages (Note [Pipeline programs] in pipeline_schedule.h).
enum class StreamKind {
  compute, all_gather, reduce_scatter, all_reduce, host_to_device, device_to_host, all_to_all, p2p
};
inline constexpr int kStreamCount = 8;
const char* to_string(StreamKind stream);

enum class OpKind {
  all_gather,      // gather a unit's parameters (all_gather stream)
  wait,            // compute waits for a unit's all-gather (FSDP's wait_for_unshard); zero duration
  forward,         // one layer's forward on one micro-batch
  recompute,       // one checkpointed layer's forward again, before its backward
  backward,        // one layer's backward
  backward_input,  // zero-bubble pipelines: one layer's input-gradient part of backward (Note [Split backward])
  backward_weight, // zero-bubble pipelines: one layer's weight-gradient part of backward, after its input part
  free_unsharded,  // free a unit's gathered parameters (reshard); zero duration
  reduce_scatter,  // reduce a unit's gradients into shards (reduce_scatter stream)
  all_reduce,      // all-reduce gradients: across replicas (HSDP) or the world (replicated gradients)
  host_to_device,  // CPU offload: copy a parameter shard in before its all-gather
  device_to_host,  // CPU offload: copy a gradient shard out after its reduce-scatter
  optimizer_step,  // update this rank's shard
  all_to_all,      // MoE tokens to their experts' ranks and back, over the expert-parallel group (all_to_all stream)
  send,            // pipeline: a stage's boundary activation (forward) or its input's gradient (backward) to the
                   // neighbour stage (p2p stream)
  recv,            // pipeline: the compute stream waits for the matching send of the neighbour stage; zero duration
};
const char* to_string(OpKind kind);
// The ops that move data between ranks (each on its own stream, Note [Runner streams]).
inline bool is_collective(OpKind kind) {
  return kind == OpKind::all_gather || kind == OpKind::reduce_scatter || kind == OpKind::all_reduce ||
         kind == OpKind::all_to_all;
}

// The ranks a collective runs over, as the executor creates sub-communicators and the cost model places them.
enum class GroupKind { none, shard, replica, world, partial_reshard, expert };
const char* to_string(GroupKind group);

struct MemoryChange {
  MemoryCategory category;
  std::int64_t bytes;
  int owner_unit = -1;  // whose buffer it is, for an executor to find it: -1 = the op's own unit
};

struct Op {
  int id = 0;
  OpKind kind = OpKind::forward;
  StreamKind stream = StreamKind::compute;
  int unit = -1;         // plan unit id, -1 when not unit-specific
  int layer = -1;        // model layer index for compute ops
  int micro_batch = 0;
  // Pipeline programs (Note [Pipeline programs] in pipeline_schedule.h): the stage this op belongs to and, for a send
  // or recv, the stage at the other end; -1 outside pipeline programs.
  int stage = -1;
  int peer_stage = -1;
  CompactVector<int, 4> deps;  // ops (by id, always earlier in the list) that must finish before this op starts

  // Collectives and copies.
  std::int64_t bytes = 0;  // S in nccl-tests' convention (see collective_cost.h), or the copy size
  GroupKind group = GroupKind::none;
  int group_size = 1;
  bool group_spans_nodes = false;
  int group_ranks_per_node = 0;  // how many of the group's ranks share a node (0: as many as fit)
  int element_bytes = 0;   // the dtype a collective moves (2: bf16, 4: fp32), or a copy's elements
  // Reductions (Note [Reduction buffers]): the reduction on this op's stream whose held buffers this one frees at its
  // start (-1: none), and whether it is the unit's last reduction of its micro-batch (an HSDP reduce-scatter is
  // followed by the all-reduce across replicas; the gradient shard is accumulated after the last).
  int hands_over_from = -1;
  bool frees_previous_reduction = false;  // a reduction that takes its stream's held buffers over (even when none are)
  bool finishes_reduction = false;
  // Compute.
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;  // the layer's mode for this pass
  // The kernels of a forward, backward or recompute op (the op-level compute model, costmodel/pass_kernels.h), shared
  // by the ops of one layer and pass; null for other ops.
  std::shared_ptr<const PassKernels> kernels;
  double flops = 0;         // hardware FLOPs of the kernels (recompute included)
  double memory_bytes = 0;  // the optimizer step's HBM traffic
  std::int64_t zeroed_bytes = 0;  // a fresh buffer zero-filled before the op's work: its unit's full-size gradient,
                                  // at the unit's first backward op of a micro-batch (both runners fill it)
  std::int64_t optimizer_elements = 0;  // optimizer_step: shard elements updated
  // backward_input: of its activation allocates, the output gradients kept for the weight part (Note [Split backward
  // lowering] in lowering_split_backward.cpp), which that op frees; a runner holds them as torch does.
  std::int64_t kept_gradient_bytes = 0;
  bool on_host = false;                 // runs in host memory (CPU offload of the optimizer)

  // Memory changes (CompactVector: an op has one or two of each, kept in place of a heap block).
  CompactVector<MemoryChange, 1> allocates;       // at the op's start
  CompactVector<MemoryChange, 1> frees;           // at the op's end
  CompactVector<MemoryChange, 1> frees_at_start;  // at the op's start, before its allocations: buffers the previous
                                                  // reduction of its stream held until now (Note [Reduction buffers])
};

// A context-parallel ring step (Note [Context-parallel lowering]): a send between the ranks of a CP group, which names
// no stage at its other end, unlike a pipeline program's transfers between stages.
inline bool is_ring_step(const Op& op) { return op.kind == OpKind::send && op.peer_stage < 0; }

// Note [Reduction buffers]: FSDP2 keeps a reduction's buffers alive until the next unit's post-backward, which first
// waits for the previous reduce-scatter and drops it, then issues its own (FSDPParamGroup.post_backward:
// `wait_event(reduce_scatter_state.event); reduce_scatter_state = None`, and likewise `all_reduce_state` for HSDP's
// all-reduce; the root's final backward callback drops the last ones). So a reduce-scatter's input (the unit's
// full-size gradient) and output, or an HSDP all-reduce's buffer, are freed at the start of the next reduction on the
// same stream in the same micro-batch — which starts after it, and after the next unit's backward — and the last
// reduction of a micro-batch frees them at its end. `frees_at_start` names the previous reduction's unit
// (MemoryChange::owner_unit). Freeing them when their own collective completes would make the peak depend on how
// far the other ranks lag: with that rule, measured on 2 CPU ranks, a two-blocks-per-unit plan peaks at 12.14 MB or
// 12.81 MB from step to step, depending on whether a reduce-scatter finishes before the next unit's gradients exist.

// Note [Fragments]: the lowering marks where each unit's part of a pass begins — right after the unit's wait for its
// parameters (or where that wait would be when it has none), before it issues prefetches — and where each micro-batch
// begins. The ops between two marks are a fragment: they depend on the unit and the unit its prefetch names, and every
// one of them starts at or after the mark, so a search can time a fragment from the state of the streams at the mark
// (fragment.h) instead of lowering and simulating whole steps.
enum class FragmentPass { step, forward, backward };
struct FragmentMark {
  int first_op = 0;  // the fragment's first op; it runs to the next mark (or the end)
  int micro_batch = 0;
  FragmentPass pass = FragmentPass::step;  // step: the micro-batch's start, before its root all-gather
  int unit = -1;
};

// Note [Schedule order]: `ops` is one valid issue order: every op's dependencies and every earlier op of its stream
// come before it. Each stream runs its ops in this order, one at a time (a CUDA stream, or the executor's
// communication thread), so an interpreter can walk the list once.
struct StepSchedule {
  std::vector<Op> ops;
  MemoryByCategory persistent{};  // allocated before the step and kept (shards, optimizer states, overhead)
  // FSDP's ranks: the data-parallel ranks of a 2-D plan (parallel.data_parallel_world_size(), set by lower_plan; the
  // interpreters read this one number on every op, so it stays a field).
  int world_size = 1;
  int gpus_per_node = 1;  // of them per node
  // The whole world's degrees (Note [ParallelDims] in costmodel/parallel_dims.h), parallel_dims(plan, world).
  // Note [2-D plans] (tensor_parallel_view.h): with parallel.tp() > 1, each of the world_size ranks is a TP group of
  // that many ranks of one node that run the same ops on their shards of every layer; the TP collectives are in the
  // passes' kernels.
  ParallelDims parallel;
  int micro_batches = 1;
  std::int64_t seq_len = 0;             // each micro-batch's shape on one rank: sequences × tokens
  std::int64_t sequences_per_micro_batch = 0;
  std::int64_t tokens_per_step = 0;     // all ranks: micro-batches × micro-batch × seq × data-parallel ranks
  double model_flops_per_rank = 0;      // forward + backward of the model, no recompute (MFU numerator)
  double hardware_flops_per_rank = 0;   // including recompute (HFU numerator)
  int compute_element_bytes = 2;        // the dtype layers compute in (peak FLOP/s to use)
  std::vector<std::string> unit_names;
  std::vector<FragmentMark> fragments;  // Note [Fragments], in op order
  // Per model layer, the largest single tensor its passes allocate per micro-batch: the size class of the layer's
  // activation memory for the caching allocator's model (Note [Allocator size classes] in caching_allocator.h).
  std::vector<std::int64_t> activation_tensor_bytes;
  // The ops' memory changes as flat arrays, made by lower_plan from the fields above (Note [Memory effects table] in
  // memory_effects.h); null for a schedule built by hand, which the simulator then flattens itself.
  std::shared_ptr<const MemoryEffects> memory_effects;

  std::size_t count(OpKind kind) const;
};

}  // namespace shardplan
