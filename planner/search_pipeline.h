// The plan search over pipeline parallelism (Note [Pipeline search]): pipeline degrees, schedules and virtual stages
// jointly with the tensor-parallel degrees and checkpointing patterns, each candidate lowered into its per-rank
// programs and simulated together, pruned by a floor of its step against the best plan known.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "pipeline_order.h"
#include "search.h"
#include "step_analysis.h"

namespace shardplan {

// Note [Pipeline search]: torchtitan's layout (torchtitan/distributed/parallel_dims.py: mesh [pp, dp_replicate,
// dp_shard, cp, tp], pp outermost) — pipeline ranks each hold world / pp GPUs — with its defaults: FSDP full shard
// over each stage's data-parallel ranks, one unit per block ([parallelism] fsdp over every TransformerBlock), the
// stage split of default_pipeline (and beside it a balanced split, Note [Balanced stage split] in stage_balance.h),
// and the user's global batch (Note [Equal global batch] in search_2d.cpp: without --global-batch, one sequence per
// GPU of the whole world, so a pipeline of pp ranks runs tp × pp sequences per step). Searched: the micro-batch
// (torchtitan's pipeline_parallel_microbatch_size, Note [Pipeline micro-batch] in pipeline_grid.cpp), pp (powers of
// two whose ranks divide the world and keep at least 4 blocks each — a bound on the work, said in
// search_pipeline.cpp), the schedule (1F1B, Interleaved1F1B with 2, 4 or 8 stages per rank — Note [Virtual stages
// searched] in pipeline_grid.cpp says which — and InterleavedZeroBubble with 2, torch's ZB1P, without activation
// checkpointing only:
// under checkpointing torch's split backward recomputes each block once per weight group, Note [Split backward
// lowering], which torchtitan measured at a tenth of Interleaved1F1B's throughput, pytorch/torchtitan#773; pinned,
// it is planned with any checkpointing; never with torch.compile or float8, which torchtitan does not run it with),
// tp and ep (the FSDP search's degrees: a model with experts takes tp 1 and the expert-parallel degrees of
// expert_parallel_candidates, or the pinned one) and the checkpointing patterns of knob_settings.
// A tied model has no pipeline plans (Note [Tied layers under a pipeline] in pipeline_schedule.h). The wrap,
// strategy and prefetch knobs of a pipeline plan are torchtitan's, not searched: the answer is the fastest fitting
// candidate of this grid (exact over the grid, a heuristic over the rest), and the CLI says so. The context-parallel
// degree is kept where the user pins it, else cp 1 and the degrees Note [Context-parallel search] tries
// (search_context_parallel.h: 2, 4, 8 for sequences of 16,384 tokens or more) are in the grid
// (PipelineSearchOptions::context_parallel_degrees). Their floors are those of one CP rank's program with its ring
// (micro_batch_floors with the degree: every ring step's attention and the ring's tensor ops on the compute stream),
// or, where the TP view cannot lower that, the share's alone (one ring step of attention: valid, looser).
//
// Note [Pipeline floor]: a candidate is simulated only when a lower bound of its step is below the best plan known.
// With c_s the compute-stream kernels of stage s for one micro-batch (the per-layer floor of Note [Compute floor]) and
// C_r the sum over rank r's stages, over M micro-batches:
// - each rank's compute stream runs its M · C_r of kernels one at a time: step ≥ M · max_r C_r;
// - the rank holding stage pp − 1 cannot start before micro-batch 0's forward crossed stages 0 … pp − 2, and after
//   its last backward the last micro-batch's backward still crosses them: step ≥ M · C_{pp−1} + Σ_{s<pp−1} c_s (any
//   order: GPipe, 1F1B and interleaved — the first stage on that rank is pp − 1). Not for a split backward
//   (InterleavedZeroBubble, Note [Split backward lowering]): the last stage's final weight parts may run beside
//   the last micro-batch's input gradients crossing the stages before it, so such a schedule takes the first bound;
// - the schedule's own order replayed (replay_pipeline_order) with f_s and c_s − f_s, the forward and the backward
//   (recompute included) parts of c_s: each rank's compute stream runs its actions in that order, each after the
//   actions it waits for on other stages (the forward of the stage before, the backward of the stage after), and in
//   the lowered programs each waits for at least that (a recv for its send, which follows the pass) and takes at
//   least its floor, so every action ends no earlier than in the replay. It holds the bubbles the two bounds above
//   miss — a middle rank's way in and out, the warm-up torch's interleaved schedule runs in rounds (llama3.1-405b on
//   256 x 8 H100s, pp 8 Interleaved1F1B x 2 at 64 micro-batches: 43.16 s by those bounds, the simulated step 46.31 s,
//   its ranks idle 8-14 %). Not for a split backward: the per-layer floors do not part a stage's backward into its
//   input and weight gradients;
// - each rank's own stream (Note [Step floor] for one GPU): its kernels K_r = M · Σ its stages' kernels, its dispatch
//   D_r, and U_r the busiest of the streams its layers' passes carry every micro-batch (context parallelism's ring
//   sends, MoE all-to-alls: SettingFloors::layer_stream_s, M times) give max(U_r, K_r + D_r + (1 − 1/s)·max(0,
//   U_r − D_r)) — what the communication stretches the compute beside it, or is exposed. The ring is what the first
//   bounds missed most: llama3.1-405b on 64 x 8 H100s at 32,768 tokens simulated five CP 4-8 points (floors 216-222 s,
//   steps 274-330 s, 1.1 s of a 2.3 s plan) against a 229 s FSDP plan; all five are proven no faster now.
// The first three leave out every collective and point-to-point op, and all of them the optimizer step and memory
// waits, which only lowers the bound, so pruning by it never drops a candidate that would have won. Memory, with h_s
// the activation bytes stage s holds per micro-batch from its forward to its backward (the per-layer floor beside Note
// [Activation floor]): a rank's device peak is at least the context overhead plus what is live at any point of its
// actions in the schedule's own order (pipeline_order) — after each pass, Σ over its stages of in-flight × h_s, the
// gathered parameters of the stages it has run (kept from the first forward, as Note [Pipeline programs] lowers FSDP
// under PP) and the full-size gradients of those it has run backward (a split backward's weight part: its input part
// keeps the activations and writes no gradient) — plus the model states of its layers as one flat unit over the stage's
// data-parallel ranks (states_floor_layout, as Searcher::can_fit), and torch.distributed.pipelining's own buffers as
// the lowering sizes them (Note [Pipeline buffers] in pipeline_schedule.h, pipeline_buffer_bytes): every
// micro-batch's receive buffers, each stage output in the forward cache until its backward, and the last stage's
// every output until the step ends. Each is a floor of what the lowering allocates (one flat unit pads no more than
// per-block units); a candidate with a rank over the usable bytes is not simulated. The buffers grow with the
// micro-batches: llama3.1-405b at 131,072 tokens on 512 H100s simulated 16 CP points of 128-512 micro-batches whose
// floors were 40-75 GiB and whose peaks 208-753 GiB (5.1 of the plan's 6.5 s); with the buffers none is simulated
// (1.2 s, the same "no plan fits").
struct PipelineSearchOptions {
  std::vector<int> pipeline_degrees;         // pp candidates above 1 (pipeline_degree_candidates, or one pinned)
  std::vector<int> tensor_parallel_degrees;  // as SearchOptions (validated per degree; refused ones skipped)
  std::vector<int> expert_parallel_degrees{1};  // as SearchOptions: each point's training takes one
  // Pinned schedule and stages per rank (--pipeline-schedule, --stages-per-rank); empty: Note [Pipeline search]'s.
  // Interleaved1F1B pinned with stages_per_rank 0: its counts searched (Note [Virtual stages searched]).
  std::optional<PipelineScheduleKind> schedule;
  int stages_per_rank = 0;
  KnobPins pins;
  std::int64_t usable_bytes = 0;  // the cap less the headroom: every rank's device peak must be within it
  double known_step_s = std::numeric_limits<double>::infinity();  // only plans faster than this are wanted
  std::size_t threads = 1;  // Note [Pipeline waves]: the answer is the same for any count
  std::shared_ptr<SettingFloorCache> floor_cache;  // Note [Shared setting floors]; null: none shared
  // The context-parallel degrees of the grid: one pinned (--context-parallel), or 1 and those Note [Context-parallel
  // search] tries. At each the grid runs on one CP rank's share (Note [Fixed context parallel degree] in
  // context_parallel_lowering.h), so its floors are that rank's — its compute floor has one ring step of attention
  // where the ring runs cp, and no ring buffers: still lower bounds — and each simulated candidate is the CP plan,
  // the whole sequence back.
  std::vector<int> context_parallel_degrees{1};
};

struct PipelineCandidate {
  Plan plan;
  std::string knobs;  // "pp 8, Interleaved1F1B x 2, TP 8, full_shard, AC full, micro-batch 1"
  PipelineStepAnalysis analysis;
  bool fits = false;  // every rank's device peak within usable_bytes
};

struct PipelineSearchResult {
  bool feasible = false;  // a candidate fits and beats known_step_s
  PipelineCandidate best;
  std::vector<int> context_parallel_degrees;  // the grid's (PipelineSearchOptions::context_parallel_degrees)
  std::vector<int> expert_parallel_degrees;   // the grid's (PipelineSearchOptions::expert_parallel_degrees)
  std::size_t candidates = 0;        // grid points considered (torchtitan's split of each)
  // Note [Balanced stage split]: the other splits of those points tried, for time or memory (each then counted as
  // simulated, proven no faster, unable to fit or refused as the grid's points are).
  std::size_t balanced_splits = 0;
  std::size_t simulated = 0;         // lowered and simulated
  std::size_t beaten_by_floor = 0;   // Note [Pipeline floor]: proven no faster than the best known
  std::size_t over_memory_floor = 0;  // Note [Pipeline floor]: proven not to fit
  std::size_t refused = 0;           // the plan's stages, batch or degrees do not divide (InputError on lowering)
  // Why, in the order first met: the distinct reasons, the first kRefusalReasonsKept of them (`plan` names them when
  // a pinned --pipeline-parallel gives no plan).
  static constexpr std::size_t kRefusalReasonsKept = 4;
  std::vector<std::string> refusal_reasons;
  double seconds = 0;
  void refuse(const std::string& reason);  // counts a refused point and keeps its reason
};

// Why no pipeline plan can answer for this model and training ("" where one can), first met of: a model whose tied
// layers a pipeline would put on different stages (Note [Tied layers under a pipeline] in pipeline_schedule.h),
// optimizer-in-backward (torchtitan refuses it with a pipeline; Note [Optimizer in backward]), pinned CPU offload
// (not modelled with pipeline parallelism). `plan` and `capacity` both leave the grid out for it.
std::string pipeline_model_conflict(const ModelSpec& model, const TrainingConfig& training, const KnobPins& pins);

// Powers of two from 2 whose pp ranks divide the world, each rank keeping at least 4 blocks (a work bound: Note
// [Pipeline search] in search_pipeline.cpp).
std::vector<int> pipeline_degree_candidates(const ModelSpec& model, const Cluster& cluster);

// The fastest fitting pipeline plan of the grid of Note [Pipeline search] faster than options.known_step_s.
PipelineSearchResult search_pipeline_plans(const ModelSpec& model, const Cluster& cluster,
                                           const HardwareProfile& profile, const TrainingConfig& training,
                                           const PipelineSearchOptions& options);

// Note [Pipeline floor]: per stage (layer ranges), its kernels' seconds and the activation bytes it holds per
// micro-batch, summed from a setting's per-layer floors (setting_floors).
struct StageFloors {
  std::vector<double> compute_s;
  std::vector<double> forward_s;   // compute_s's forward part
  std::vector<double> dispatch_s;  // compute_s's dispatch overheads
  std::vector<std::array<double, kStreamCount>> stream_s;  // SettingFloors::layer_stream_s of its layers
  std::vector<std::int64_t> held_bytes;
};
StageFloors stage_floors(const SettingFloors& floors, const std::vector<LayerRange>& stages);

// Note [Pipeline floor]: the bound for stage floors `stage_compute_s` (one micro-batch each), `stages_per_rank`
// stages per rank placed round robin (stage s on rank s mod pp), over `micro_batches`; `split_backward`: the
// schedule splits backward (the first bound alone).
double pipeline_step_floor_s(const std::vector<double>& stage_compute_s, int pipeline_degree, int micro_batches,
                             bool split_backward = false);
// Note [Pipeline floor]: the schedule's order replayed with each stage's compute floor — its forward, and its
// recompute and backward as one — and communication free. 0 for a split backward (the floors do not part a stage's
// backward into its input and weight gradients).
double pipeline_replay_floor_s(const StageFloors& stages, const PipelineOrder& order);
// Note [Pipeline floor]: each rank's compute stream stretched by its layers' per-micro-batch communication (Note
// [Step floor] for one rank: its kernels K, its dispatch D, its busiest such stream U); 0 when `least_slowdown` < 1.
double pipeline_stretch_floor_s(const StageFloors& stages, int pipeline_degree, int micro_batches,
                                double least_slowdown);
// Note [Pipeline floor]: what FSDP holds for a pipeline plan's layers (states_floor_layout on one TP rank's
// `view_model`, over the stage's `data_parallel_ranks`): per rank its shards, persistent; per stage its gathered
// parameters, kept from its first forward to its last backward, and its full-size gradient, accumulated from its first
// backward to the last micro-batch's (Note [Pipeline programs] in pipeline_schedule.h). 0 where the layout refuses.
struct PipelineStatesFloor {
  std::vector<std::int64_t> rank_states_bytes;
  std::vector<std::int64_t> stage_gathered_bytes;
  std::vector<std::int64_t> stage_gradient_bytes;
};
PipelineStatesFloor pipeline_states_floor(const ModelSpec& view_model, const TrainingConfig& training,
                                          const ShardingStrategy& strategy, const PipelinePolicy& policy,
                                          int data_parallel_ranks, int gpus_per_node);

// Note [Pipeline floor]: per pipeline rank, the most bytes live at once for stages holding `stage_held_bytes` of
// activations per micro-batch (pp × stages per rank of them, round robin), walking `schedule`'s order, with `states`
// and torch.distributed.pipelining's `buffers` (Note [Pipeline buffers] in pipeline_schedule.h; none: activations
// only); InputError where the order refuses the shape.
std::vector<std::int64_t> pipeline_live_floor_bytes(const std::vector<std::int64_t>& stage_held_bytes,
                                                    const PipelineStatesFloor* states, int pipeline_degree,
                                                    PipelineScheduleKind schedule, int micro_batches,
                                                    const PipelineBufferBytes* buffers = nullptr);
// Where each rank's floor peaks: per stage, the micro-batches whose activations the rank holds there (Note
// [Balanced stage split]'s memory estimate of other splits).
struct PipelineFloorPeaks {
  std::vector<std::vector<int>> held_micro_batches;  // [rank][stage]; 0 for the stages of other ranks
};
// The same on the schedule's order built once, and where each rank peaks (`peaks`, when given).
std::vector<std::int64_t> pipeline_live_floor_bytes(const std::vector<std::int64_t>& stage_held_bytes,
                                                    const PipelineStatesFloor* states, const PipelineOrder& order,
                                                    const PipelineBufferBytes* buffers,
                                                    PipelineFloorPeaks* peaks = nullptr);

}  // namespace shardplan
