// RankProgram: what one rank of a plan runs — its place in the mesh, its program and the model and units it holds —
// lowered here once for both executors (Note [Rank program]).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "model_spec.h"
#include "parallel_dims.h"
#include "plan.h"
#include "schedule.h"
#include "unit_layout.h"

namespace shardplan {

// Note [Rank program]: an executor runs a plan's StepSchedule, never the Plan itself. A rank's program is the plan
// lowered for the ranks it shares its data-parallel work with: plain FSDP lowers the plan over the world; with tensor
// parallelism the DP group's view of one TP rank's model (Note [2-D plans]); with a pipeline the program of its
// pipeline rank over its stages' layers (Note [Pipeline programs]); with context parallelism the plan's own lowering,
// whose ring steps the CP ranks run together (Note [Context-parallel runner]). Both runners take their schedule, the
// model and units they build their layers and flat parameters from, and their groups from here, so the lowering of a
// rank lives in one place, in the schedule library the runners link (not the search).
struct RankProgram {
  ParallelDims dims;
  RankPlacement placement;   // dims.placement(rank): its coordinates, groups and slice
  StepSchedule schedule;     // the program this rank runs
  ModelSpec model;           // the model its layers are: the whole one, a TP rank's slice or a pipeline rank's stages
  Plan plan;                 // the plan its units follow over `model` (the DP group's view; a pipeline rank's stages)
  std::vector<std::size_t> whole_layers;  // per layer of `model`: its layer in the whole model
  std::vector<UnitLayout> layouts;        // per unit of `plan`: its shard layout over the data-parallel ranks
  int gpus_per_node = 1;                  // of the data-parallel ranks `layouts` are placed on
};

// `plan` validated against `model` on dims.world_size() ranks where it has tensor parallelism or a pipeline
// (validate_plan, whose errors name the plan's fields: the caller runs it first); `dims` = parallel_dims(plan, world).
// InputError naming the field when the plan cannot be lowered for that world. `check_before_lowering` sees the program
// without its schedule (the units and their layouts known): an executor refuses what it cannot run there, before the
// lowering's own errors.
RankProgram lower_rank_program(const Plan& plan, const ModelSpec& model, const ParallelDims& dims, int gpus_per_node,
                               int rank, const std::function<void(const RankProgram&)>& check_before_lowering = {});

}  // namespace shardplan
