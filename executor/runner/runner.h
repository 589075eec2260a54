// Runner: executes a StepSchedule for training steps on a Communicator — the executor's interpreter of the IR.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "adamw.h"
#include "comm_counters.h"
#include "communicator.h"
#include "context_parallel_runner.h"
#include "flat_param.h"
#include "layer_kernel.h"
#include "param_group.h"
#include "pipeline_p2p.h"
#include "plan.h"
#include "runner_groups.h"
#include "schedule.h"
#include "step_clock.h"
#include "tensor_parallel_runner.h"
#include "timeline.h"
#include "tracking_allocator.h"

namespace shardplan::runner {

// Immutable policy of a run.
struct RunnerOptions {
  std::uint64_t seed = 0;           // parameter init (the same stream as ModelRuntime::init_parameters(seed))
  runtime::AdamWOptions adamw{};
  int gpus_per_node = 0;            // for lowering's group placement; 0 = the whole world on one node
};

// What one step measured on this rank (loss and step time are agreed over all ranks).
struct StepReport {
  double loss = 0;          // mean over every rank's micro-batches: the loss of the global batch
  double local_loss = 0;    // this rank's micro-batches only (0 on a pipeline rank without the last stage)
  double step_time_s = 0;   // the slowest rank's time from the starting barrier to the end of its last op
  std::int64_t tokens = 0;  // tokens in the global batch (schedule.tokens_per_step)
  long long peak_bytes = 0;            // tracked peak of the step, all categories together
  MemoryByCategory memory_at_peak{};   // the breakdown at that peak
  MemoryByCategory peak_by_category{}; // each category's own maximum in the step
  comm::CommCounters collectives;      // collectives the step's schedule issued on this rank
  // Pipeline messages its send and recv ops posted (Note [Pipeline runner]), or the CP ring's steps (Note
  // [Context-parallel runner]).
  comm::P2pCounters p2p;
  long long allocator_peak_bytes = 0;  // GPU executor: the device pool's own high-water mark (0 on the CPU)
  Timeline timeline;                   // source "measured": one event per op, the memory series
};

// Note [Runner streams]: the runner walks `schedule.ops` once, in order (Note [Schedule order]). Compute, wait, free
// and optimizer ops run on the calling thread, each after its dependencies have completed. Collective ops are issued
// asynchronously on the communicator their GroupKind names as soon as their dependencies have completed and every
// earlier op of their stream has been issued (a collective whose dependency is still in flight — HSDP's all-reduce
// after its reduce-scatter — is parked and issued at the next op boundary where it is ready, so compute is never
// blocked by it); a collective's end is when its completion is first observed (handles are polled at every op
// boundary, which also drives MPI's progress, Note [Progress]). Nothing else is reordered: prefetching happens
// exactly where the plan's lowering put the all-gathers.
class Runner {
 public:
  // Lowers `plan` for world.size() ranks (with plan.tensor_parallel_degree > 1: Note [2-D mesh]; with a pipeline:
  // this rank's pipeline program, Note [Pipeline runner]; with context parallelism: a CP rank's program, Note
  // [Context-parallel runner]), checks the runner can execute it (check_executable),
  // creates the groups (collective over `world`) and initialises this rank's shards. InputError/InternalError carry
  // this rank.
  Runner(const ModelSpec& model, const Plan& plan, comm::Communicator& world, RunnerOptions options = {});
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // One training step: `micro_batches` holds this rank's schedule.micro_batches batches, each of the plan's
  // micro-batch × seq_len (whole sequences also under context parallelism). Collective over the world.
  StepReport step(std::span<const runtime::Batch> micro_batches);

  // The full model's parameters in the whole model's layout order, gathered from the shards (and, with tensor
  // parallelism, from every TP rank's slice; with a pipeline, from every stage; collective over the world).
  std::vector<float> gather_parameters();

  const StepSchedule& schedule() const { return schedule_; }
  // The layout of the parameters this rank's flat parameters hold: the whole model's, or with a pipeline its stages'
  // layers, concatenated in stage order (pipeline_rank_model); with tensor parallelism its TP rank's slice of those
  // (runtime::tensor_parallel_rank_model).
  const runtime::ModelLayout& model_layout() const { return layout_; }
  int rank() const { return rank_; }
  int tensor_parallel_degree() const { return dims_.tp(); }
  int tensor_parallel_rank() const { return placement_.slice.tp_rank; }
  // The data-parallel ranks and this rank's index among them (Note [2-D mesh]): which micro-batches step() takes —
  // the TP ranks of one DP rank take the same ones, and so do the CP ranks of one CP group (Note [Context-parallel
  // runner]: the data-parallel ranks over cp, torchtitan's batch "dp"). world size and rank without either.
  int data_parallel_size() const { return dims_.data_parallel_world_size() / dims_.cp(); }
  int data_parallel_rank() const { return placement_.data_parallel_rank / dims_.cp(); }
  // Note [Context-parallel runner]: the CP ranks and this rank's (1 and 0 without context parallelism); step() then
  // takes whole sequences and trains on this rank's share of each.
  int context_parallel_degree() const { return dims_.cp(); }
  int context_parallel_rank() const { return placement_.coordinates.cp; }
  // Note [Pipeline runner]: the pipeline ranks and this rank's (1 and 0 without a pipeline); schedule() is then this
  // pipeline rank's program and model_layout() the layout of its stages' layers.
  int pipeline_degree() const { return dims_.pp(); }
  int pipeline_rank() const { return placement_.coordinates.pp; }
  // The pipeline messages one step posts on this rank: its program's send and recv ops (zero without a pipeline);
  // with context parallelism the ring's steps, one send and one receive per send op of the program.
  comm::P2pCounters expected_step_p2p() const;
  // Collective counts one step issues on each rank, from the schedule (what StepReport::collectives must equal).
  static comm::CommCounters expected_collectives(const StepSchedule& schedule);
  // The same for this runner's step: the schedule's collective ops, plus the TP collectives in its passes' kernels
  // (expected_pass_collectives).
  comm::CommCounters expected_step_collectives() const;

  // What a checkpoint (checkpoint.h) saves and restores: this rank's flat parameters (shard, m, v) in unit order, the
  // AdamW step count (the bias correction depends on it, so a resumed run must continue from the same count), and
  // the model and plan the shards belong to (a checkpoint of another plan has other shard sizes).
  std::vector<FlatParam*> flat_params();
  std::int64_t optimizer_steps() const { return optimizer_steps_; }
  void set_optimizer_steps(std::int64_t steps) { optimizer_steps_ = steps; }
  const ModelSpec& model() const { return model_; }
  const Plan& plan() const { return plan_; }

 private:
  class StepWalker;
  friend class StepWalker;

  ModelSpec model_;
  Plan plan_;
  RunnerOptions options_;
  int rank_ = 0;
  int world_size_ = 1;
  // Note [ParallelDims]: parallel_dims(plan, world) and this rank's place in it (TP slice, data-parallel rank:
  // data_parallel_world_size() ranks are the ones the schedule was lowered for).
  ParallelDims dims_;
  RankPlacement placement_;
  ModelSpec rank_model_;        // model_ or its stages' layers, or its TP rank's slice of those
  Plan lowered_plan_;           // plan_, or with TP its DP group's plan (Note [2-D mesh]), or its pipeline rank's
  // Per layer of rank_model_: its layer in model_ (the identity unless a pipeline leaves this rank some stages).
  std::vector<std::size_t> whole_layers_;
  StepSchedule schedule_;
  runtime::ModelLayout layout_;        // of rank_model_
  runtime::ModelLayout whole_layout_;  // of model_
  runtime::ModelLayout held_layout_;   // of model_'s layers whole_layers_, unsplit (whole_layout_ without a pipeline)
  std::vector<std::unique_ptr<runtime::LayerKernel>> kernels_;
  StepClock clock_;
  TrackingAllocator tracker_;
  std::unique_ptr<RunnerGroups> groups_;
  std::unique_ptr<CommTensorParallelGroup> tensor_parallel_;  // null without tensor parallelism
  std::unique_ptr<PipelineP2p> pipeline_;                     // null without pipeline parallelism
  // Note [Pipeline buffers] (planner/pipeline_schedule.h): per (held stage, micro-batch, forward?) the receive buffer
  // torch.distributed.pipelining makes once and keeps — an activation for a non-first stage, a gradient for a
  // non-last one; empty without a pipeline.
  std::map<std::tuple<int, int, bool>, TrackedBuffer> receive_buffers_;
  std::unique_ptr<CommContextParallelGroup> context_parallel_;  // null without context parallelism
  std::vector<std::unique_ptr<FlatParam>> params_;
  std::vector<ParamGroup> param_groups_;
  std::int64_t optimizer_steps_ = 0;
};

}  // namespace shardplan::runner
