// Plan search: wrap boundaries (the DP) jointly with strategy, activation checkpointing, micro-batch and offload,
// every candidate re-simulated; baselines (FSDP's auto-wrap policies, DDP) and a diagnosis when nothing fits.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster.h"
#include "hardware_profile.h"
#include "host_memory.h"
#include "model_spec.h"
#include "plan.h"
#include "simulator.h"

namespace shardplan {

enum class SearchObjective { time, memory };

// Note [Pinned knobs]: a knob the user gives is fixed, a knob left out is searched — for every command that searches
// (plan, capacity). The CLI records which flags were given (CLI11's count) here, once; the search, the baselines it
// admits as candidates, and the degrees tried all read it. Precision is not searched: it is always the given recipe
// (bf16-mixed by default).
class SettingFloorCache;  // setting_floor_cache.h

struct KnobPins {
  std::optional<ShardingStrategy> strategy;  // --strategy
  bool checkpointing = false;                // --ac / --ac-every: the training's checkpointing on every block it names
  bool micro_batch = false;                  // --micro-batch: the training's micro-batch, whatever the global batch
  std::optional<bool> offload;               // --cpu-offload (true) / --cpu-offload=false
  std::optional<int> tensor_parallel;        // --tensor-parallel N (auto: 1, 2, 4, 8 searched)
  std::optional<int> expert_parallel;        // --expert-parallel N (omitted: expert_parallel_candidates searched)
  // Search only checkpointing patterns that apply one mode to every block (none, full, selective-op), not full AC on
  // the first 25/50/75 % of the blocks: set by an export that cannot say those (restrict_search_to_torchtitan).
  bool whole_model_checkpointing = false;
  // Search CPU offload only with ZeRO stage 3 strategies (zero_stage): set by an export whose offload of parameters
  // exists at stage 3 alone (restrict_offload_to_export: DeepSpeed's offload_param).
  bool offload_at_zero3_only = false;

  // Whether `plan` (a baseline offered as a candidate) keeps every pinned knob.
  bool admits(const Plan& plan) const;
};

struct SearchOptions {
  std::int64_t memory_cap_bytes = 0;  // 0: the GPU's memory
  // Note [Memory headroom] (memory_headroom.h): the share of the cap a plan leaves free; a candidate fits when its
  // device peak (reserved + overhead) is within the cap less this. The CLI's default is the memory error band's
  // (Note [Error bands] in costmodel/error_band.h).
  double memory_headroom_fraction = 0;
  SearchObjective objective = SearchObjective::time;
  // DP caps tried: each yields the fastest partition whose units span at most that many blocks, so the memory cap
  // (which grows with the largest units) meets the fastest partition that fits it.
  std::vector<int> max_unit_blocks = {1, 2, 3, 4, 5, 6, 7, 8};
  bool allow_offload = true;                        // CPU offload as a last resort
  bool with_baselines = true;                       // capacity sweeps skip them
  // After the joint search, try per-unit refinements of the best plan — prefetch depth 0 or 2, and keeping the last
  // units gathered from forward to backward (reshard_after_forward = false) — keeping any that is faster and fits
  // (with joint_prefetch_depth the search has covered both already, where it finished).
  bool refine = true;
  // Search prefetch depth (none, one or two units ahead) jointly with the wrapping, exactly (Note [Prefetch depth] in
  // searcher_setting.cpp); otherwise only by the refinements.
  bool joint_prefetch_depth = true;
  // Labels the prefetch-depth searches' label DP may take before their best-first search runs alone (Note
  // [Bound-only wrap search] in wrap_dp.h, where this figure is measured); 0: no limit.
  std::size_t depth_search_dp_labels = 20000;
  // Let the wrapping search keep single units gathered from forward to backward (WrapSearchOptions::
  // per_unit_reshard); false: every unit follows the strategy's reshard_after_forward, as torchtitan's one
  // fsdp_reshard_after_forward policy does (restrict_search_to_torchtitan).
  bool per_unit_reshard = true;
  // Where a setting's wrap search gave up or dropped the kept-gathered choice, search again under tightened floors
  // (Note [Tightened floor] in searcher_setting.cpp) before the per-cap DPs answer.
  bool tightened_floors = true;
  // Note [2-D plans] (tensor_parallel_view.h): the tensor-parallel degrees tried, each jointly with every knob above;
  // degrees the model or the node cannot take are skipped. {1}: FSDP alone.
  std::vector<int> tensor_parallel_degrees = {1};
  // Expert-parallel degrees to search (Note [Expert parallelism] in unit_layout.h), each a search of its own; empty:
  // the training's expert_parallel_degree only. expert_parallel_candidates gives those worth trying.
  std::vector<int> expert_parallel_degrees;
  // Note [Pinned knobs]: what the user fixed; search_options_for fills the degrees and offload above from it.
  KnobPins pins;
  // A plan this fast (step seconds, objective time) is already known from another search — another tensor- or
  // expert-parallel degree's: only faster plans are wanted, so settings and wrappings that cannot beat it are skipped
  // as proven (Note [Compute floor] in compute_floor.cpp). A search whose settings are all proven that way reports no
  // plan; wrappings whose modelled step (a lower bound) is below it are still simulated, and may be reported slower.
  double known_step_s = std::numeric_limits<double>::infinity();
  // Threads for each degree's knob settings (Note [Setting waves] in searcher.cpp; the degrees run one after another,
  // Note [Shared incumbent] in degree_search.h); the result does not depend on it. Capacity sweeps, which run
  // points at once, leave it at 1.
  std::size_t threads = 1;
  // Note [Fixed context parallel degree] (search_context_parallel.cpp): above 1, this search's training is one CP
  // rank's share of a context-parallel plan of this degree; every plan it builds, wrap fragments and simulations
  // alike, is the CP plan the share's plan stands for, and each setting is floored as the CP rank's program (Note
  // [Context-parallel floors]).
  int context_parallel_degree = 1;
  // Note [Shared setting floors] (setting_floor_cache.h): one micro-batch's floors, shared with the other searches of
  // this model (a plan's degrees and pipeline search, a capacity sweep's points); null: search_plans makes one.
  std::shared_ptr<SettingFloorCache> floor_cache;
};

struct PlanCandidate {
  Plan plan;
  SimulationSummary summary;
  std::string knobs;  // "full_shard, AC full, micro-batch 2, DP ≤4 blocks/unit"
  // Its device peak fits the memory cap less the headroom (fits_in_memory) and, offloading, its states a node's host
  // memory.
  bool fits = false;
};

struct BaselineResult {
  std::string name;  // "transformer_auto_wrap_policy", "size_based_auto_wrap_policy(1e8)", "no_shard (DDP)"
  PlanCandidate candidate;
};

struct InfeasibleDiagnosis {
  std::string dominant_term;             // of the smallest-memory candidate's peak; "host_memory" when that limits
  std::int64_t smallest_peak_bytes = 0;  // the least memory any candidate needs
  std::vector<std::string> suggestions;  // cheapest changes that would make it fit, with their predicted peaks
  // Note [Host memory]: the leanest CPU-offload plan fits the GPUs, but its states do not fit a node's host memory.
  bool host_memory_limited = false;
  HostMemoryUse host_memory;             // that plan's, when host_memory_limited
};

struct SearchResult {
  bool feasible = false;
  PlanCandidate best;
  std::vector<BaselineResult> baselines;
  std::string baselines_refused;  // why there are none: FSDP alone cannot run the input (Note [Degrees a batch ...])
  InfeasibleDiagnosis diagnosis;  // filled when !feasible
  HostMemoryUse host_memory;      // the planned plan's host memory when feasible (zero unless it offloads)
  std::size_t candidates_evaluated = 0;
  // Knob settings by how their wrapping was found (Note [Wrap search]): proven fastest fitting (where the fragments'
  // step model is the simulator's, by the first fitting wrapping in model order; where it is a lower bound —
  // micro-batches whose reductions run into the next, collectives slowed beside compute — by branch and bound); or
  // that search gave up (too many faster wrappings over the cap, or its simulation budget ran out) and the per-cap
  // DPs answered. With --objective memory, proven means the least peak and the fastest plan at it (Note [Least
  // peak]). Settings no plan of which can fit (memory_floor_settings) are in neither.
  std::size_t exact_settings = 0, fallback_settings = 0;
  // Of the exact ones, those where which last units stay gathered was left to the refinements (the joint search's
  // labels outgrew their budget): exact over partitions only.
  std::size_t kept_by_refinement_settings = 0;
  // Of the exact ones, those proven without a wrap search: their compute floor is above a fitting plan's step (Note
  // [Compute floor] in compute_floor.cpp).
  std::size_t floor_settings = 0;
  // Settings skipped before any wrap search: their states floor plus activation floor exceeds the cap (Note
  // [Activation floor] in compute_floor.cpp), so no plan of theirs fits.
  std::size_t memory_floor_settings = 0;
  // The fallback settings by label ("full_shard, AC 25%, micro-batch 1"; "... (prefetch depths)" where only the
  // prefetch-depth search gave up): their best plans are heuristic, the per-cap DPs' and the refinements'.
  std::vector<std::string> heuristic_settings;
  // The kept_by_refinement_settings by label: proven over partitions, which last units stay gathered is heuristic.
  std::vector<std::string> partitions_only_settings;
  // Note [Unproven bound]: no plan of the settings above (heuristic or partitions only) is faster than this, the
  // least of their step floors; infinity where every setting is proven (and for --objective memory).
  double unproven_floor_s = std::numeric_limits<double>::infinity();
  std::string unproven_floor_setting;  // the setting of that floor, labelled as in the lists above
  double seconds = 0;
  std::int64_t memory_cap_bytes = 0;       // the GPU's memory or the --memory-cap
  std::int64_t memory_headroom_bytes = 0;  // of it kept free (Note [Memory headroom])
  double memory_headroom_fraction = 0;
  // What the fits test compares the device peak with.
  std::int64_t usable_memory_bytes() const { return memory_cap_bytes - memory_headroom_bytes; }
};

// The expert-parallel degrees the planner tries for `model` on `cluster`: 1, and where the model has experts the powers
// of two dividing every MoE block's expert count and the world, within one node (the all-to-alls stay on NVLink).
std::vector<int> expert_parallel_candidates(const ModelSpec& model, const Cluster& cluster);

// `training` gives sequence length, global batch (micro-batch and accumulation are searched when the global batch
// is set; without one, every tensor-parallel degree runs the baselines' world × micro-batch sequences: Note [Equal
// global batch] in search_2d.cpp), precision, optimizer and attention kernel; its checkpointing and micro-batch are
// used by the baselines, and by the search where options.pins fixes them (Note [Pinned knobs]).
// Over options.tensor_parallel_degrees: the fastest fitting plan of any degree (the least peak with --objective
// memory), each degree searched by search_fsdp_plans over its data-parallel view (planner/search_2d.cpp).
SearchResult search_plans(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                          const TrainingConfig& training, const SearchOptions& options);
// FSDP alone (tensor_parallel_degree 1) on this model and cluster, over options.expert_parallel_degrees (each a search
// of its own; the fastest fitting wins).
SearchResult search_fsdp_plans(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                               const TrainingConfig& training, const SearchOptions& options);

// One setting of every knob but the wrapping, and the per-block plan it starts from (the DP then re-wraps it).
struct KnobSetting {
  ShardingStrategy strategy;
  std::string ac;  // "none", "selective", "25%", "50%", "75%", "full"
  std::int64_t micro_batch = 1;
  bool offload = false;
  // Pinned (Note [Pinned knobs]): the training's own checkpointing (mode every k-th block), `ac` naming it.
  bool ac_given = false;
  std::string label() const;
};
// The settings searched, less those the pins exclude (Note [Pinned knobs]): offload pinned to the other value gives
// none.
std::vector<KnobSetting> knob_settings(const Cluster& cluster, const TrainingConfig& training, bool offload,
                                       const KnobPins& pins = {});
// Note [Pinned knobs]: the search options for `pins` on this cluster — the tensor-parallel degrees (the pinned one,
// or 1, 2, 4, 8; 1 only when offload is pinned on, offload with TP being unsupported), the expert-parallel degrees
// (the pinned one, or expert_parallel_candidates) and whether offload may be tried. InputError, one line naming the
// flags, for pins that contradict each other on this cluster (--cpu-offload with --tensor-parallel above 1; a pinned
// strategy that cannot carry the pinned expert-parallel degree).
SearchOptions search_options_for(const KnobPins& pins, const ModelSpec& model, const Cluster& cluster,
                                 SearchOptions options = {});
// The smallest micro-batch knob_settings gives the search under `pins` (the step of the most micro-batches it
// simulates): what check_search_work bounds (Note [Step work] in input_limits.h).
std::int64_t smallest_searched_micro_batch(const Cluster& cluster, const TrainingConfig& training,
                                           const KnobPins& pins = {});
Plan plan_for_knobs(const ModelSpec& model, const Cluster& cluster, const TrainingConfig& training,
                    const KnobSetting& knobs);
// One tensor-parallel degree's data-parallel view (Note [2-D plans] in tensor_parallel_view.h): one TP rank's model
// and the cluster its data-parallel ranks form (gpus_per_node / degree); the training unchanged. search_2d.cpp.
struct TensorParallelSearchView {
  ModelSpec model;
  Cluster cluster;
};
TensorParallelSearchView tensor_parallel_search_view(int degree, const ModelSpec& model, const Cluster& cluster);
// The same over `data_parallel_ranks` FSDP ranks (a pipeline plan's ranks of one stage).
Plan plan_for_knobs(const ModelSpec& model, int data_parallel_ranks, const TrainingConfig& training,
                    const KnobSetting& knobs);

// Lower bounds of every plan of one knob setting, whatever its wrapping, kept units or prefetch depth
// (compute_floor.cpp).
struct SettingFloors {
  // Note [Compute floor]: of the simulated step — the compute stream's forward, recompute and backward kernels of all
  // its micro-batches.
  double compute_s = 0;
  // Its parts (Note [Step floor] in communication_floor.h): the kernels' time unstretched, and the dispatch overheads.
  double kernels_s = 0;
  double dispatch_s = 0;
  // Note [Communication floor] (communication_floor.h): by stream, the ops a layer's passes carry whatever the
  // wrapping (runs_per_micro_batch's streams), of all the step's micro-batches.
  std::array<double, kStreamCount> micro_batch_stream_s{};
  // Note [Activation floor]: of the allocated peak less the persistent memory — the most activation bytes the passes
  // of one micro-batch hold at once.
  std::int64_t activation_peak_bytes = 0;
  // The activations one micro-batch holds where its first backward-side op starts (Note [Regather floor] in
  // communication_floor.h).
  std::int64_t turnaround_activation_bytes = 0;
  // The same kernels of one micro-batch by model layer (the layer's forward, recompute and backward): the pipeline
  // search's floor of a stage (Note [Pipeline floor] in search_pipeline.h).
  std::vector<double> layer_compute_s;
  // Their forward part alone (the rest, recompute and backward, runs in the layer's backward): the pipeline search's
  // replay of its schedule (Note [Pipeline floor]).
  std::vector<double> layer_forward_s;
  // The dispatch overheads in layer_compute_s, and by stream the ops the layer's passes carry on the streams that run
  // them once per micro-batch whatever the wrapping (runs_per_micro_batch: context parallelism's ring sends, MoE
  // all-to-alls), one micro-batch: a pipeline rank's communication floor (Note [Pipeline floor]).
  std::vector<double> layer_dispatch_s;
  std::vector<std::array<double, kStreamCount>> layer_stream_s;
  // The activation bytes a micro-batch holds from each layer's forward to its backward (what the layer's backward and
  // recompute ops free less what they allocate): the pipeline search's memory floor of a stage (Note [Pipeline floor]).
  std::vector<std::int64_t> layer_held_activation_bytes;
};
SettingFloors setting_floors(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                             const TrainingConfig& training, const KnobSetting& knobs);
// The same for one micro-batch (compute_s not yet times the step's micro-batches), and the step's micro-batches:
// what setting_floor_cache.h shares between searches whose global batch or world differ.
struct MicroBatchFloors {
  SettingFloors floors;
  int accumulation_steps = 1;
};
// `context_parallel` > 1: `training` is one CP rank's share (Note [Fixed context parallel degree]) and the micro-batch
// is lowered as that rank's program with the ring (Note [Context-parallel lowering]): its compute kernels are the CP
// plan's (every ring step's attention, the ring's tensor ops), a floor as tight as cp 1's.
MicroBatchFloors micro_batch_floors(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                                    const TrainingConfig& training, const KnobSetting& knobs, int context_parallel = 1);
// One micro-batch's floors made the step's: its compute times `micro_batches` (the activation floors stay).
void scale_to_micro_batches(SettingFloors& floors, int micro_batches);
// A floor of the model states of every plan of a setting: the whole model's persistent memory (states_floor_layout,
// padded once) with the overhead, as the search's fit test counts it (Searcher::can_fit).
std::int64_t states_floor_bytes(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                                const TrainingConfig& training, const KnobSetting& knobs);
// setting_floors(...).compute_s, which the search orders settings by and prunes with.
double compute_floor_s(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                       const TrainingConfig& training, const KnobSetting& knobs);

// A plan built with one-ahead prefetch (plan_with_units) with none (depth 0) or two units ahead (depth 2, FSDP's
// forward/backward prefetch lists of two and a rate limit of three gathers): the search's prefetch refinements.
Plan with_prefetch_depth(const Plan& plan, int depth);

// Baselines only (also used by tests); `memory_cap_bytes` is what fits_in_memory compares with (the cap less the
// headroom).
std::vector<BaselineResult> baseline_plans(const ModelSpec& model, const Cluster& cluster,
                                           const HardwareProfile& profile, const TrainingConfig& training,
                                           std::int64_t memory_cap_bytes);

nlohmann::json to_json(const SearchResult& result, const ModelSpec& model);
// Note [Unproven bound]: a setting whose wrap search gave up (heuristic), proved its partitions only (the kept units
// left to the refinements) or whose prefetch-depth search gave up is not proven, but its step floor (Note [Step
// floor] in communication_floor.h: every plan of the setting, whatever its wrapping, kept units or prefetch depth,
// takes at least that long) still bounds it; every other setting is proven — its fastest fitting plan was found (over
// wrappings of units of at most max_unit_blocks blocks, Note [Wrap search]), or its floor was above a plan already
// found, or its floors exceed the cap. So no plan of the searched knob settings is faster than min(the best plan
// found, the least floor of the unproven ones): the search's answer is within 1 − floor / step of the fastest, which
// the output states beside the settings it names. The counts and labels add up over every degree searched (tensor,
// expert and context parallel), not only the winning one's: add_setting_counts, each label with its degree.
// Adds `from`'s setting counts, labels (through `relabel`) and unproven floor to `into`'s.
void add_setting_counts(SearchResult& into, const SearchResult& from,
                        const std::function<std::string(const std::string&)>& relabel);
// Copies `from`'s setting counts, labels and unproven floor over `into`'s.
void set_setting_counts(SearchResult& into, const SearchResult& from);

// "wrapping: proven fastest fitting for N knob settings (...); heuristic for M", then one line per heuristic setting:
// which of the search's answers are proven for the cost model and which are not (search_result.cpp).
std::string render_search_proof(const SearchResult& result);

}  // namespace shardplan
