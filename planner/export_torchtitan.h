// The torchtitan export: a job-config TOML (torchtitan's [job], [model], [training], [parallelism], ... sections) for
// a plan torchtitan can run as planned, and the one-line refusal for one it cannot.
#pragma once

#include <string>

#include "model_spec.h"
#include "plan.h"
#include "plan_export.h"
#include "parallel_dims.h"
#include "search.h"
#include "training.h"

namespace shardplan {

// torchtitan's [model] name and flavor for a shardplan preset (the flavor tables in torchtitan/models/<name>/
// __init__.py); an empty name where torchtitan defines no model of that shape.
struct TorchtitanModel {
  std::string name;
  std::string flavor;
};
TorchtitanModel torchtitan_model(const std::string& preset);

// The degrees `plan` runs with on `world_size` ranks, as torchtitan's [parallelism] names them: the plan's
// ParallelDims (parallel_dims, Note [ParallelDims]) with its data-parallel ranks split into dp_replicate × dp_shard as
// its sharding strategy replicates and shards them (HSDP: replicas × shard group; DDP: all replicas). InputError, one
// line, when its sharding has no torchtitan form.
ParallelDims torchtitan_degrees(const Plan& plan, int world_size, int gpus_per_node);

// Before `plan --export torchtitan` searches: InputError, one line, for a model or training setting torchtitan cannot
// run as planned (Note [What torchtitan runs] in export_torchtitan.cpp), so a refused export prints and writes nothing.
void check_torchtitan_training(const TrainingConfig& training, const ModelSpec& model);

// And the search kept to plans torchtitan's fixed wrapping can run: one FSDP unit per transformer block, FSDP2's
// implicit one-ahead prefetch, one reshard_after_forward policy for every block, one checkpointing mode for all
// blocks (or none).
void restrict_search_to_torchtitan(SearchOptions& options);

// "torchtitan_job.toml". InputError, one line, when the plan says something torchtitan cannot (nothing is dropped).
ExportedFile export_torchtitan(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node);

}  // namespace shardplan
