// The Lowerer (Note [Lowering] in lowering.h): the state of one Plan → StepSchedule lowering. Its passes are defined
// in lowering.cpp, the ops they emit by concern in lowering_gathers.cpp (all-gathers, the rate limiter, frees),
// lowering_compute.cpp (compute ops, MoE all-to-alls) and lowering_reductions.cpp (gradient reductions, the optimizer
// step). Internal to planner/.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "context_parallel_lowering.h"
#include "lowering.h"
#include "pass_kernels.h"
#include "pipeline_order.h"
#include "reduction_handover.h"
#include "unit_layout.h"

namespace shardplan::lowering_internal {  // Note [Lowering] in lowering.h

// An op of `kind` on `stream` for `unit` in micro-batch `micro`; the caller fills the rest.
inline Op make_op(OpKind kind, StreamKind stream, int unit, int micro) {
  Op op;
  op.kind = kind;
  op.stream = stream;
  op.unit = unit;
  op.micro_batch = micro;
  return op;
}

// Note [Optimizer in backward] (optimizer_in_backward.h): the gradient shard a unit's own step reads, at the
// gradients' storage width.
inline std::int64_t in_backward_grad_bytes(const UnitLayout& layout, const Plan& plan) {
  return layout.grad_shard_elements * plan.training.precision.grad_storage_bytes;
}

struct Segment {
  int unit;
  std::size_t first_layer;
  std::size_t last_layer;  // inclusive
  bool last_in_forward = false;   // the unit's last segment in forward (its highest) and in backward (its lowest)
  bool last_in_backward = false;
};

// A pipeline stage's layers within the model a Lowerer lowers (a pipeline rank's stages, concatenated), and whether
// it is the model's first or last stage (no recv before its forward, no send after it, and so on).
struct StageSpan {
  int stage = 0;  // the global stage index
  std::size_t first_layer = 0;
  std::size_t last_layer = 0;  // inclusive
  bool first = false;
  bool last = false;
  bool previous_crosses_nodes = false;  // the stage before it is on another node
  bool next_crosses_nodes = false;      // the stage after it is
};

class Lowerer {
 public:
  // `stage_starts`: layers where a new segment must begin even within one unit's owner (the pipeline stages' first
  // layers), so every segment lies in one stage.
  Lowerer(const Plan& plan, const ModelSpec& model, const LoweringOptions& options,
          const std::vector<std::size_t>& stage_starts = {});
  StepSchedule run();
  // Note [Pipeline programs] (pipeline_schedule.h): a pipeline rank's program — its stages' passes in the order
  // `actions` gives, a recv before and a send after each pass that crosses a stage boundary, parameters gathered
  // once and kept until each stage's last backward, gradients reduced at it. `boundary_bytes`: the activation (and
  // its gradient) one micro-batch passes between stages; `output_bytes`: the model's output one micro-batch leaves on
  // the last stage (Note [Pipeline buffers]). A split backward's actions are lowered as Note [Split backward
  // lowering] says.
  // Note [Context-parallel lowering]: lower as one CP rank of `ring` (the plan given is context_parallel_rank_plan's).
  void set_ring(const ContextParallelRing& ring) { ring_ = ring; }
  StepSchedule run_actions(const std::vector<PipelineAction>& actions, const std::vector<StageSpan>& stages,
                           std::int64_t boundary_bytes, std::int64_t output_bytes = 0);

 private:
  // --- segments and the passes (lowering.cpp) ----------------------------------------------------------------------
  int owner_of(std::size_t layer) const;
  int emit(Op op);
  void mark(int micro, FragmentPass pass, int unit);
  void begin_step();
  void forward_pass(int micro);
  std::vector<int> backward_pass(int micro, bool synchronise);
  // One pass over layers [first, last] (segments wholly inside): forward_pass and backward_pass over all layers, a
  // pipeline stage's pass over its own. `reshard`: free the gathered parameters after the backward.
  void forward_layers(int micro, std::size_t first, std::size_t last);
  // `part`: the whole backward, or one part of a split one (Note [Split backward lowering] in lowering.cpp).
  void backward_layers(int micro, bool synchronise, bool reshard, std::size_t first, std::size_t last,
                       std::vector<int>& reductions, ComputePass part = ComputePass::backward);
  // `layer`'s recompute and backward op, whole or a split backward's input part; Note [Split backward lowering]:
  // its weight part (the recompute per weight-gradient group under checkpointing, then the weight op), and the
  // output gradients the input part keeps for it.
  int emit_layer_backward(std::size_t layer, int unit, int micro, int copied_in, bool input_part);
  int emit_backward_weight(std::size_t layer, int unit, int micro);
  std::int64_t kept_weight_gradient_bytes(std::size_t layer) const;
  void produce_grads(int unit, Op& op);
  void emit_recompute(std::size_t layer, int unit, int micro, int copied_in, bool transient);
  int emit_transfer(OpKind kind, const StageSpan& stage, int peer_stage, int micro, std::int64_t bytes);
  // The first `kind` op of `layer` emitted since op `first_op` (a stage pass's own op of that layer).
  Op& pass_op_of(std::size_t first_op, OpKind kind, std::size_t layer);
  // Note [Reduce-scatter waits] (lowering.cpp): the compute stream waits for the latest reduce-scatter (FSDP2).
  void wait_for_reduce_scatter(int unit, int micro);
  void take_pending_alloc(Op& op);
  bool last_segment_of(int unit, std::size_t index, bool forward) const;

  // --- all-gathers and the rate limiter (lowering_gathers.cpp) -----------------------------------------------------
  bool counts_toward_limit(int unit, bool backward) const;
  bool limiter_allows() const;
  int limiter_dependency() const;
  void request_gather(int unit, int micro, bool backward);
  void emit_gather(int unit, int micro, bool backward, int limiter_dep);
  void ensure_gathered(int unit, int micro, bool backward);
  void emit_wait(int unit, int micro);
  void emit_free(int unit, int micro, bool backward);
  void start_pass();

  // --- compute (lowering_compute.cpp) ------------------------------------------------------------------------------
  // What a layer's compute ops carry, the same in every micro-batch: worked out on the layer's first pass and reused
  // (a step of k micro-batches emits each layer's ops k times).
  struct LayerFacts {
    ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
    std::int64_t kept_bytes = 0;  // what it keeps from forward to backward, less a pipeline receive buffer's share
    std::int64_t forward_workspace_bytes = 0;
    std::int64_t backward_workspace_bytes = 0;
    std::int64_t recomputed_bytes = 0;
    std::int64_t dequantized_weight_bytes = 0;  // Note [Workspaces]: QLoRA's weight during a recomputed GEMM
    double forward_model_flops = 0;             // MFU's numerator for the layer's forward, and for its backward
    double backward_model_flops = 0;
  };
  const LayerFacts& layer_facts(std::size_t layer);
  // What `layer` keeps from its forward to its backward, less what a pipeline receive buffer holds for it.
  std::int64_t kept_bytes(std::size_t layer) const;
  ActivationCheckpointing checkpointing(std::size_t layer) const;
  std::shared_ptr<const PassKernels> kernels_of(std::size_t layer, ComputePass pass, ActivationCheckpointing mode);
  // The FLOPs of kernels_of(layer, pass, mode), summed once per layer, pass and mode.
  double flops_of(std::size_t layer, ComputePass pass, ActivationCheckpointing mode, const PassKernels& kernels);
  int emit_compute(OpKind kind, std::size_t layer, int unit, int micro, ComputePass pass);
  double model_flops_of(std::size_t layer, ComputePass pass);
  void emit_all_to_alls(std::size_t layer, int unit, int micro, int after);

  // --- context parallelism (lowering_context_parallel.cpp, Note [Context-parallel lowering]) ------------------------
  // The ring's K/V (and in backward dK/dV) sends of `layer`'s pass, issued before the pass op (so they overlap it)
  // once `before` (the compute op before the pass, -1: none) has run; the last send's id, -1 when the layer has no
  // ring. Then, after the pass op `pass_op`, finish_ring: backward's last dK/dV send, and the next compute op waits
  // for the last send.
  int emit_ring_sends(std::size_t layer, int unit, int micro, ComputePass pass, int before);
  void finish_ring(std::size_t layer, int unit, int micro, ComputePass pass, int pass_op, int last_send);
  Op ring_send(std::size_t layer, int unit, int micro, std::int64_t bytes, int element_bytes, int degree);
  const std::optional<ContextParallelAttention>& ring_attention(std::size_t layer);

  // --- activation offloading (lowering_offload.cpp, Note [Activation offloading] in activation_offload.h) ---------
  // After the forward op `forward` of `layer`: its kept activations' copy out to the host, which frees them on the
  // device; -1 when the layer keeps nothing on the host.
  int emit_copy_out(std::size_t layer, int unit, int micro, int forward);
  // Before `layer`'s backward: its kept activations' copy back (allocated on the device at its start), issued after
  // the last compute op emitted so far; the op, or -1 when nothing comes back. Emitted once per layer and pass.
  int emit_copy_in(std::size_t layer, int unit, int micro);

  // --- gradient reductions and the optimizer step (lowering_reductions.cpp) ----------------------------------------
  void reduce(int unit, int micro, std::vector<int>& reductions);
  // Note [Optimizer in backward] (optimizer_in_backward.h): `unit`'s own optimizer step after its reduction (the op
  // `reduction`, -1 when none was emitted: after its last backward op); nothing unless the plan steps in backward.
  void step_in_backward(int unit, int micro, int reduction);
  void optimizer_step(const std::vector<int>& reductions);

  const Plan& plan_;
  const ModelSpec& model_;
  LoweringOptions options_;
  std::vector<UnitLayout> layouts_;
  std::vector<int> layer_owner_;  // per layer, its unit (0: the root)
  std::vector<Segment> segments_;
  StepSchedule schedule_;
  std::vector<bool> gathered_, waited_, partial_copy_, grads_allocated_, grads_produced_;
  std::vector<int> last_reduction_;  // each unit's latest gradient reduction op (-1: none yet)
  std::vector<int> unit_steps_;      // Note [Optimizer in backward]: the units' steps in backward, in issue order
  std::vector<int> gather_op_;
  std::vector<int> copied_in_;   // Note [Activation offloading]: each layer's copy back in this backward (-1: none yet)
  std::vector<int> copied_out_;  // and its latest copy out (-1: none)
  struct LimiterEntry {
    int unit;
    int free_op;  // the free_unsharded op that released it, -1 until issued
  };
  std::vector<LimiterEntry> limiter_sequence_;  // every gather the rate limiter counts, in issue order
  std::deque<int> pending_;                     // gather requests held back by the rate limiter
  ContextParallelRing ring_;  // Note [Context-parallel lowering]; degree 1: none
  // Per layer, the bytes of its saved input that a pipeline receive buffer holds (Note [Pipeline buffers]).
  std::vector<std::int64_t> received_input_bytes_;
  std::vector<std::optional<std::optional<ContextParallelAttention>>> ring_attention_;  // per layer, when asked
  int current_stage_ = -1;  // the pipeline stage whose pass is being emitted (Op::stage), -1 outside pipelines
  int last_compute_ = -1;
  int compute_waits_for_ = -1;  // an all-to-all the next compute op depends on (-1: none)
  int last_free_ = -1;
  int last_backward_ = -1;
  int last_reduce_scatter_ = -1;  // the latest reduce-scatter no compute op waited for yet (-1: none)
  MemoryChange pending_alloc_{MemoryCategory::activations, 0};
  ReductionHandover handover_;  // Note [Reduction buffers] (schedule.h)
  std::array<std::vector<std::shared_ptr<const PassKernels>>, kComputePasses * kCheckpointingModes> kernel_cache_;
  std::vector<std::shared_ptr<const PassKernels>> distinct_kernels_;  // kernel_cache_'s objects, in creation order
  // kernel_cache_'s FLOPs; < 0: not yet
  std::array<std::vector<double>, kComputePasses * kCheckpointingModes> flops_cache_;
  std::vector<std::optional<LayerFacts>> layer_facts_;  // per layer, from its first pass on
};

// What every lowering ends with: the layers' activation size classes (Note [Allocator size classes]) and, when asked
// (LoweringOptions::flatten_memory_effects), the memory effects table (Note [Memory effects table]).
void finish_lowering(StepSchedule& schedule, const Plan& plan, const ModelSpec& model, bool flatten_memory_effects);

}  // namespace shardplan::lowering_internal
