// Plan: the user-visible decision — units, per-unit strategy and prefetch, activation checkpointing, training knobs.
#pragma once

#include <string>
#include <vector>

#include "model_spec.h"
#include "parallel_dims.h"
#include "pipeline_order.h"
#include "sharding.h"
#include "training.h"
#include "wrapping.h"

namespace shardplan {

// FSDP2's reshard_after_forward: true frees the gathered parameters after forward, false keeps them until backward,
// and an integer k keeps a copy sharded over k ranks (e.g. one node) so the backward all-gather stays intra-node.
struct ReshardAfterForward {
  bool enabled = true;
  int group_size = 0;  // > 0: reshard to this smaller group instead of freeing everything
  bool keeps_partial_copy() const { return enabled && group_size > 0; }
};

struct PlanUnit {
  std::string name;
  bool is_root = false;   // the root unit owns every layer no other unit covers
  LayerRange layers;      // non-root units: a contiguous layer range
  ShardingStrategy strategy;
  ReshardAfterForward reshard_after_forward;
  // Unit ids gathered when this unit's forward (backward) starts, as FSDP2's set_modules_to_forward_prefetch /
  // set_modules_to_backward_prefetch.
  std::vector<int> forward_prefetch;
  std::vector<int> backward_prefetch;
};

struct OffloadPolicy {
  bool params = false;     // sharded parameters and gradients live in host memory (FSDP CPUOffload)
  bool optimizer = false;  // optimizer states live and step in host memory (ZeRO-Offload)
};

// Note [Pipeline policy]: pipeline parallelism as torchtitan runs it ([parallelism] pipeline_parallel_degree,
// pipeline_parallel_schedule, and its split of the layers into stages): `degree` pipeline ranks, each running
// `stages_per_rank` stages (the interleaved schedules' virtual stages), the model cut into `stages` contiguous layer
// ranges, degree × stages_per_rank of them. Such a plan lowers into one program per pipeline rank
// (lower_pipeline, Note [Pipeline programs] in pipeline_schedule.h); FSDP runs over each stage's data-parallel ranks.
struct PipelinePolicy {
  int degree = 1;  // pp; 1: no pipeline
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int stages_per_rank = 1;
  std::vector<LayerRange> stages;  // empty when degree is 1
  bool enabled() const { return degree > 1; }
};

// Note [Context parallel policy]: context parallelism as torchtitan runs it ([parallelism] context_parallel_degree):
// the sequence of every micro-batch sharded over `degree` ranks with torch's load-balanced (round-robin) split, ring
// attention over them (Note [Ring attention] in costmodel/context_parallel.h), FSDP sharding over dp_shard × cp. The
// cp ranks sit between dp_shard and tp in torchtitan's mesh (Note [ParallelDims]). Such a plan lowers as one CP
// rank's program (Note [Context-parallel lowering] in planner/context_parallel_lowering.h).
struct ContextParallelPolicy {
  int degree = 1;  // cp; 1: no context parallelism
  bool enabled() const { return degree > 1; }
};

struct Plan {
  std::string name = "plan";
  std::string model;                // what the plan was made for (informational, checked loosely)
  std::vector<PlanUnit> units;      // units[0] is the root unit
  std::vector<ActivationCheckpointing> layer_checkpointing;  // one entry per model layer
  TrainingConfig training;
  int grad_accumulation_steps = 1;  // micro-batches per optimizer step on each rank
  int max_inflight_all_gathers = 2; // FSDP1's limit_all_gathers rate limiter; 0 = unlimited
  OffloadPolicy offload;
  // Note [Tensor parallel degree]: Megatron-style tensor parallelism inside a node (PyTorch's parallelize_module on
  // the "tp" dimension of a 2-D DeviceMesh), FSDP over the remaining world / tensor_parallel_degree ranks. 1 = none.
  // The plan's choice (its JSON field, the search's knob): what the degree means for a world — data-parallel ranks,
  // groups, a rank's slice — comes from parallel_dims(plan, world) below; `> 1` tests and messages still read it.
  int tensor_parallel_degree = 1;
  PipelinePolicy pipeline;
  ContextParallelPolicy context_parallel;
};

// Note [ParallelDims] (costmodel/parallel_dims.h): the one place a plan's degrees become the world's ParallelDims —
// tp from tensor_parallel_degree, pp from pipeline.degree, cp from context_parallel.degree, ep from
// training.expert_parallel_degree, dp_shard the rest of the world (torchtitan's dp_shard = -1). dp_replicate is 1:
// HSDP's replicas are still chosen per unit by its strategy (a plan may mix strategies, ShardingLayout::replicas).
// InputError prefixed "plan" when the degrees do not fit the world.
ParallelDims parallel_dims(const Plan& plan, int world_size);

// FSDP's usual wrapping: one unit per transformer block, the rest in the root unit (not resharded after forward),
// every unit with `strategy`, one unit prefetched ahead in forward and backward, the training's AC on every block.
// torchtitan's default pipeline for `degree` ranks of `stages_per_rank` stages each: its split of the blocks
// (torchtitan_stage_blocks with the embedding and the head weighing one block each, stage_partition.h) as layer
// ranges. InputError naming --pipeline-parallel when the model has too few blocks for the stages.
PipelinePolicy default_pipeline(const ModelSpec& model, int degree, PipelineScheduleKind schedule, int stages_per_rank);

Plan default_plan(const ModelSpec& model, const TrainingConfig& training, const ShardingStrategy& strategy,
                  const Wrapping& wrapping, int world_size);

// A plan with these units and the template's knobs: default one-ahead prefetch lists, root kept gathered.
// `kept_gathered` (empty: as the template says): per unit, true sets reshard_after_forward = false.
Plan plan_with_units(const ModelSpec& model, const Plan& plan_template, const std::vector<LayerRange>& units,
                     const std::vector<bool>& kept_gathered = {});

// Checks a plan against its model and world: units cover each layer at most once and in order, prefetch ids exist,
// shard groups divide the world, the checkpointing list has one entry per layer. InputError names the unit.
void validate_plan(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node);

// Note [Tensor parallel degree]: a power of two that divides the GPUs of one node (TP's collectives run on every
// block, so they stay on NVLink, as torchtitan and Megatron-LM place them) and the world, the attention heads, the
// key/value heads and the FFN width (ColwiseParallel shards each projection's output features evenly), of a model
// whose architecture is known (explicit layer lists have no heads to split). InputError naming the field otherwise.
void validate_tensor_parallel_degree(int degree, const ModelSpec& model, int world_size, int gpus_per_node,
                                     const std::string& where);

// The part of validate_plan that bounds the work and memory one step implies (Note [Step work] in input_limits.h):
// micro-batches x layers, and every byte the step could allocate below 2^60. InputError naming the limit.
void validate_step_size(const Plan& plan, const ModelSpec& model);

// Note [Uniform requires_grad]: FSDP1 with use_orig_params=False flattens each unit into a FlatParameter that must
// have one requires_grad ("FlatParameter requires uniform requires_grad", torch/distributed/fsdp/_flat_param.py;
// pytorch/pytorch#104690, #91167), so no unit may hold both frozen and trainable parameters. A layer that mixes them
// itself (LoRA puts trainable adapters beside the frozen weights of every block it targets) cannot be wrapped at all
// with whole layers as units — answer.ai's fsdp_qlora wraps each adapter as an FSDP unit of its own instead, which
// shardplan's units (layer ranges) cannot express — and the root unit always holds the layers outside the blocks.
// FSDP2 and FSDP1 with use_orig_params=True may mix (Note [Frozen parameters in FSDP] in unit_layout.h); a user picks
// the front end with --fsdp-version 1|2 and --use-orig-params true|false (plan JSON: "finetune": {"fsdp_version",
// "use_orig_params"}).
// InputError naming the first unit that mixes, under a front end that requires uniform requires_grad.
void check_uniform_requires_grad(const Plan& plan, const ModelSpec& model);
// For the plan search, whose units are ranges of blocks beside a root of the other layers: the diagnosis when no
// wrapping can satisfy the front end (a layer that mixes, or a root that does), else "".
std::string requires_grad_conflict(const ModelSpec& model);
// Whether the layers together hold both trainable and frozen (or 4-bit) parameters.
bool mixes_requires_grad(const ModelSpec& model, const std::vector<std::size_t>& layers);

// The plan's units as the memory model sees them (root first).
std::vector<UnitInfo> plan_units(const Plan& plan, const ModelSpec& model);

}  // namespace shardplan
