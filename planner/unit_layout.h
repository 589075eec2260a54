// UnitLayout: one plan unit's sizes on one rank — padding, shards, gathered bytes — as lowering and memory need them,
// and each layer's activation bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memory_category.h"
#include "model_spec.h"
#include "plan.h"

namespace shardplan {

struct UnitLayout {
  std::string name;
  std::int64_t param_count = 0;
  int param_group = 1;      // ranks the parameters are sharded over (1 = replicated)
  int grad_group = 1;
  int optimizer_group = 1;
  int replicas = 1;         // HSDP replicas of the shard group
  int partial_group = 0;    // reshard_after_forward = k: the smaller group the kept copy is sharded over
  bool gathers = false;           // parameters are sharded and all-gathered before use
  bool casts_replicated = false;  // replicated parameters used through a copy in the compute dtype
  bool grad_copies = false;       // backward produces a full-size gradient before reduction / accumulation

  std::int64_t padded_elements = 0;       // flat parameter right-padded to a multiple of param_group
  std::int64_t shard_elements = 0;        // padded_elements / param_group
  std::int64_t grad_padded_elements = 0;  // padded to a multiple of grad_group
  std::int64_t grad_shard_elements = 0;
  std::int64_t optimizer_shard_elements = 0;

  MemoryCategory gathered_category = MemoryCategory::unsharded_params;  // root_unit for the root
  std::int64_t gathered_bytes = 0;      // the gathered (or cast) copy in the compute dtype
  std::int64_t partial_copy_bytes = 0;  // the copy kept sharded over partial_group after forward
  std::int64_t grad_copy_bytes = 0;     // the full-size gradient in the compute dtype
};

// One unit's sizes: its strategy resolved for the world (InputError when it cannot be), `param_count` parameters.
UnitLayout unit_layout(const PlanUnit& spec, std::int64_t param_count, const PrecisionRecipe& precision, int world_size,
                       int gpus_per_node);

// Resolves every unit's strategy for the world (InputError names the unit) and computes its sizes.
std::vector<UnitLayout> unit_layouts(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node);

// The memory a step starts with and keeps: each unit's shards (params, grads, optimizer states — on the host instead
// when offloaded) and the runtime overhead.
MemoryByCategory persistent_memory(const std::vector<UnitLayout>& layouts, const Plan& plan,
                                   std::int64_t context_overhead_bytes);

// Bytes the forward of `layer` keeps for its backward under `mode`, for one micro-batch on one rank: the layer's
// activations per token (ModelSpec) times the micro-batch's tokens, in the compute dtype.
std::int64_t kept_activation_bytes(const ModelSpec& model, const TrainingConfig& training, std::size_t layer,
                                   ActivationCheckpointing mode);

// The checkpointing the plan gives `layer`: its per-layer mode on transformer blocks; other layers are never
// recomputed (the plan's modes apply to blocks only).
ActivationCheckpointing layer_checkpointing_of(const Plan& plan, const ModelSpec& model, std::size_t layer);

// The working set a recompute of `layer` rebuilds beside what its forward kept (0 when it is not recomputed): all it
// keeps without checkpointing, less what it kept.
std::int64_t recomputed_activation_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer);

// Note [Workspaces]: memory a layer's op holds only while it runs, allocated at its start and freed at its end.
// Forward: a checkpointed block materialises its whole working set before the checkpoint drops what it does not
// keep (torch.utils.checkpoint runs the block's ordinary forward), so all it would keep without checkpointing, less
// what it keeps, is alive until the op ends; and the loss's fp32 upcast (LayerSpec workspaces). Backward: the
// loss's fp32 logits gradient and its cast.
std::int64_t forward_workspace_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer);
std::int64_t backward_workspace_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer);

// HBM bytes a fused optimizer step moves per shard element: parameters read and written, gradients read, master
// weights and states read and written, each once (apex FusedAdam; torch.optim.AdamW(fused=True)).
std::int64_t optimizer_bytes_per_element(const PrecisionRecipe& precision, OptimizerKind optimizer);

}  // namespace shardplan
