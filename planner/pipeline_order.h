// PipelineOrder: the micro-batch order of a pipeline-parallel step — per pipeline rank, the compute actions of its
// stages (forward, backward, or backward split into input and weight gradients) in the order
// torch.distributed.pipelining's schedules run them — and a dependency check that replays an order in unit times.
#pragma once

#include <string>
#include <vector>

namespace shardplan {

// Note [Pipeline orders]: the policies torch.distributed.pipelining names (torch/distributed/pipelining/schedules.py,
// get_schedule_class; torchtitan's [parallelism] pipeline_parallel_schedule takes the same names):
//   GPipe                 every forward, then every backward (ScheduleGPipe);
//   1F1B                  stage s runs min(M, pp − s) forwards, then one backward and one forward in turn, then the
//                         remaining backwards (Schedule1F1B: "last stage has 1 warmup, ..., first stage num_stages");
//   Interleaved1F1B       v stages per rank (rank r holds stages r, r + pp, ..., Megatron's virtual stages);
//                         warmup (v − 1)·(M / rounds) + 2·(pp − 1 − r) forwards, then 1F1B over the local stages in
//                         rounds of M / rounds micro-batches, depth first (ScheduleInterleaved1F1B,
//                         _calculate_single_rank_operations and _get_1f1b_rank_ops; rounds = max(1, M / pp), and M
//                         must be a multiple of the rounds);
//   InterleavedZeroBubble the backward split into its input gradient (I) and weight gradient (W), warmup
//                         (v − 1)·(M / rounds) + (pp − 1 − r), W deferred past the first r steady steps to fill the
//                         bubbles (ScheduleInterleavedZeroBubble, the ZB1P schedule of Qi et al., "Zero Bubble Pipeline
//                         Parallelism", arXiv:2401.10241; with one stage per rank it is their ZB-H1).
// torch pads the orders with no-ops to keep the ranks in lockstep; those are timing, which the simulator derives from
// dependencies, so an order here is the actions alone.
enum class PipelineScheduleKind { gpipe, one_f_one_b, interleaved_1f1b, interleaved_zero_bubble };
const char* to_string(PipelineScheduleKind kind);  // torch's names: "GPipe", "1F1B", ...
// InputError naming `field` and the four names when `name` is none of them (case-insensitive, as torch's lookup).
PipelineScheduleKind pipeline_schedule_from_string(const std::string& name, const std::string& field);
// The stages per rank torchtitan gives a schedule when none is asked for (pipeline_module_split without
// pipeline_parallel_layers_per_stage): 1 for GPipe and 1F1B, 2 for the looped (interleaved) schedules.
int default_stages_per_rank(PipelineScheduleKind kind);

enum class PipelineActionKind { forward, full_backward, backward_input, backward_weight };
const char* to_string(PipelineActionKind kind);  // "F", "B", "I", "W" (torch's action letters)

struct PipelineAction {
  PipelineActionKind kind = PipelineActionKind::forward;
  int stage = 0;  // global stage index, 0 .. ranks × stages_per_rank − 1
  int micro_batch = 0;
  bool operator==(const PipelineAction&) const = default;
};

struct PipelineOrder {
  PipelineScheduleKind kind = PipelineScheduleKind::one_f_one_b;
  int ranks = 1;            // the pipeline-parallel degree (pp)
  int stages_per_rank = 1;  // virtual stages (v); the model is cut into ranks × stages_per_rank stages
  int micro_batches = 1;    // M per step
  std::vector<std::vector<PipelineAction>> by_rank;  // each rank's actions, in the order it runs them
  // Stage s runs on rank s mod pp (torch's loop placement: rank r holds stages r, r + pp, ...).
  int rank_of_stage(int stage) const { return stage % ranks; }
  int stage_count() const { return ranks * stages_per_rank; }
};

// The order `kind` gives. InputError (naming the field "pipeline") where torch refuses the shape: GPipe and 1F1B
// take one stage per rank; the interleaved ones M a multiple of max(1, M / pp).
PipelineOrder pipeline_order(PipelineScheduleKind kind, int ranks, int stages_per_rank, int micro_batches);

// Note [Pipeline order check]: an order replayed in unit times — each rank runs its actions one after another, a
// forward of stage s waits for the forward of s − 1 (same micro-batch), a backward (full or input) of s for the
// backward of s + 1 and, on the last stage, for its own forward; a weight gradient for the input gradient — with
// communication free. What it gives is a property of the order alone (that it completes, every action once, and its
// micro-batches in flight), used to test the orders against the published bubble formulas; the step's real timing is
// the simulator's, from the lowered programs (DESIGN.md: bubbles come out of the simulator, not a formula).
struct PipelineReplay {
  double makespan = 0;                    // in the unit times given
  std::vector<double> busy_by_rank;       // compute time per rank
  std::vector<int> peak_in_flight_by_stage;  // micro-batches forwarded and not yet fully backwarded (W included)
  double bubble_fraction() const;         // 1 − mean busy / makespan
};
// InternalError when an action waits for one that never runs (a deadlock) or an action is missing or repeated.
PipelineReplay replay_pipeline_order(const PipelineOrder& order, double forward_s, double backward_input_s,
                                     double backward_weight_s);
// The same with each stage's own times (one entry per stage; a full backward takes its input and weight parts):
// Note [Pipeline floor] replays an order so with floors of the stages' compute.
struct StageDurations {
  std::vector<double> forward_s, backward_input_s, backward_weight_s;
};
PipelineReplay replay_pipeline_order(const PipelineOrder& order, const StageDurations& durations);

}  // namespace shardplan
