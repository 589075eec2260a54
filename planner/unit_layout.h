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

// Note [Frozen parameters in FSDP]: fine-tuning splits a unit's parameters into those that train (T elements), those
// frozen in full precision (F) and QLoRA's 4-bit weights (their packed codes, Q elements of the quant storage dtype,
// which Note [QLoRA storage dtype] in costmodel/finetune.h makes the param dtype). How FSDP holds them:
//  - FSDP2 (fully_shard) shards every parameter on its own and gives gradients, reduce-scatters and optimizer states
//    only to those with requires_grad (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py: the reduce-scatter
//    takes the parameters whose grad is not None). Frozen weights are kept in the param dtype — they need no fp32
//    copy, and PEFT/HF fine-tuning loads the base model in it (`torch_dtype=torch.bfloat16`) while PEFT keeps the
//    adapters in fp32 (get_peft_model's autocast_adapter_dtype) — so only the trainable part is cast for the
//    all-gather. The unit is padded per dtype group (T; F + Q) to a multiple of the shard group.
//  - FSDP1 flattens a unit into one FlatParameter of one dtype (the recipe's storage dtype) padded to a multiple of
//    the shard group. With use_orig_params=True it may mix frozen and trainable parameters, but the FlatParameter
//    then has one gradient over all of it: "FSDP supports mixing frozen and non-frozen parameters, but it's
//    recommended to avoid doing so to prevent higher than expected gradient memory usage" (FullyShardedDataParallel
//    docstring, use_orig_params; litgpt#1417) — so a unit with anything trainable gets full-size gradients and
//    reduce-scatters, and optimizer states only for T. With use_orig_params=False it may not mix at all
//    (validate_plan refuses it: "FlatParameter requires uniform requires_grad").
//  - QLoRA's quantisation constants are not parameters: every rank keeps all of them (Note [Quantisation constants]
//    in costmodel/finetune_apply.h), counted with the sharded parameters and never offloaded.
// Full training is T only, where both front ends agree with the layout before fine-tuning existed.
// Note [Expert parallelism]: expert parallelism (EP) as torchtitan composes it with FSDP2 (torchtitan
// parallelize_llama4 / apply_moe_ep_fsdp: the experts get `fully_shard(block.moe.experts, mesh=dp_mod_ep)`, the EP
// mesh borrowing from dp_shard; DeepSpeed-MoE's expert groups likewise): the ranks form groups of EP consecutive
// ranks; each rank of a group holds num_experts / EP of every MoE block's routed experts, and FSDP shards those over
// the N / EP ranks that hold the same experts — so a rank's shard (and its gradient and optimizer shards) is what
// FSDP alone gives it, N ranks sharing every parameter. What changes:
//  - a unit's all-gather, gathered copy, full-size gradient and reduce-scatter carry its non-expert parameters and
//    only its own experts: the routed experts' elements / EP (UnitLayout::remote_expert_elements are not gathered);
//  - tokens travel to the ranks of their experts and back: per MoE block, an all-to-all dispatch and an all-to-all
//    combine over the EP group in forward, two more in backward (their gradients), two more in a recompute, each
//    carrying every routed slot's hidden vector (tokens × top-k × capacity factor × hidden × the compute dtype),
//    balanced routing assumed (what the router's load-balancing loss aims at; Fedus et al. 2021 §2.2).
// Expected expert work per rank is unchanged (EP ranks each receive tokens × top-k slots for num_experts / EP
// experts), so compute and activations stay as under FSDP alone. Simplifications: the unit's gathered experts travel
// in its one all-gather over the shard group (torchtitan issues a second all-gather over the N / EP group: the same
// bytes, another group's latency); the all-to-alls run after the block's compute op and the next compute op waits
// for them (in the block they sit between the router and the experts, and after the experts: the same serial time,
// since the expert GEMMs need the dispatched tokens); their send and receive buffers are the routed activations
// already counted in the block's kept activations.
struct UnitParams {
  std::int64_t trainable = 0;             // T
  std::int64_t routed_expert = 0;         // of T + F: the MoE blocks' routed experts (Note [Expert parallelism])
  std::int64_t frozen = 0;                // F
  std::int64_t packed_bytes = 0;          // QLoRA's 4-bit codes
  std::int64_t quant_constant_bytes = 0;  // replicated on every rank
  std::int64_t fp8_weights = 0;           // of T: float8 projections' weights (fp8_weight_elements, pass_kernels.h)
};

// The parameters of `layers` by how they train (their LayerFinetune, or all trainable).
UnitParams unit_params(const ModelSpec& model, const std::vector<std::size_t>& layers);

struct UnitLayout {
  std::string name;
  std::int64_t param_count = 0;  // elements FSDP holds: T + F + Q (Note [Frozen parameters in FSDP])
  std::int64_t grad_elements = 0;  // elements with gradients: T (FSDP2), or all of a unit with any T (FSDP1)
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
  std::int64_t optimizer_shard_elements = 0;  // of the trainable elements only

  std::int64_t shard_bytes = 0;           // this rank's parameter shard, every dtype group at its storage width
  std::int64_t cast_shard_bytes = 0;      // the shard's compute-dtype copy that feeds the all-gather (0: none needed)
  std::int64_t quant_constant_bytes = 0;  // QLoRA's constants, whole on every rank

  MemoryCategory gathered_category = MemoryCategory::unsharded_params;  // root_unit for the root
  std::int64_t gathered_bytes = 0;      // the gathered (or cast) copy in the compute dtype
  std::int64_t partial_copy_bytes = 0;  // the copy kept sharded over partial_group after forward
  std::int64_t grad_copy_bytes = 0;     // the full-size gradient in the compute dtype
  // Note [Expert parallelism]: the routed-expert elements the other ranks of this rank's EP group hold; not in the
  // gathered copy, the full-size gradient or the reduce-scatter.
  std::int64_t remote_expert_elements = 0;
  std::int64_t reduce_scatter_elements() const { return grad_padded_elements - remote_expert_elements; }
};

// One unit's sizes: its strategy resolved for the world (InputError when it cannot be), `params` under `training`'s
// precision and FSDP front end.
UnitLayout unit_layout(const PlanUnit& spec, const UnitParams& params, const TrainingConfig& training, int world_size,
                       int gpus_per_node);

// A floor of the model states of any wrapping under `strategy`: the whole model as one unit, padded once (Σ ceil(Ψ_i
// / g) >= ceil(Ψ / g) per dtype group), with FSDP1's gradients on the trainable elements only (a wrapping's units
// without any have none). Searches skip settings whose floor already exceeds a cap.
UnitLayout states_floor_layout(const ShardingStrategy& strategy, const ModelSpec& model, const TrainingConfig& training,
                               int world_size, int gpus_per_node);
// The same floor for the states of `layers` only (a pipeline rank's, Note [Pipeline floor] in search_pipeline.h).
UnitLayout states_floor_layout(const ShardingStrategy& strategy, const ModelSpec& model,
                               const std::vector<std::size_t>& layers, const TrainingConfig& training, int world_size,
                               int gpus_per_node);

// Resolves every unit's strategy for the world (InputError names the unit) and computes its sizes.
std::vector<UnitLayout> unit_layouts(const Plan& plan, const ModelSpec& model, int world_size, int gpus_per_node);

// Elements the units' right-padding adds to what FSDP holds (UnitLayout::padded_elements less param_count), summed.
std::int64_t padding_elements(const std::vector<UnitLayout>& layouts);

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
// loss's fp32 logits gradient and its cast. QLoRA: the dequantised copy of one 4-bit weight in the compute dtype,
// alive through its GEMM (Note [Dequantisation kernels] in costmodel/pass_kernels.cpp) — the largest of the layer's,
// in forward, recompute and backward alike (dequantised_weight_bytes).
std::int64_t forward_workspace_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer);
std::int64_t backward_workspace_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer);
std::int64_t dequantized_weight_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer);
// Note [Allocator size classes] (caching_allocator.h): the largest single tensor a pass of the layer allocates per
// micro-batch (LayerSpec::largest_tensor_bytes_per_token, or the dequantised QLoRA weight where that is larger).
std::int64_t largest_activation_tensor_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer);

// HBM bytes a fused optimizer step moves per shard element: parameters read and written, gradients read, master
// weights and states read and written, each once (apex FusedAdam; torch.optim.AdamW(fused=True)); the 8-bit
// optimizers' absmax values too (Note [8-bit optimizers] in costmodel/precision.h), a fraction of a byte.
double optimizer_bytes_per_element(const PrecisionRecipe& precision, OptimizerKind optimizer);

}  // namespace shardplan
