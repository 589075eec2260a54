// Precision recipes (which dtype each copy of the model state is kept in) and optimizers (how many states per param).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardplan {

// Note [Float8 training]: torchao's float8 training (torchao/float8/README.md; convert_to_float8_training) swaps the
// nn.Linear modules its filter accepts for Float8Linear: each GEMM casts its operands to float8 e4m3 (gradients e5m2)
// with a scale from their amax — one per tensor (tensorwise) or per row (rowwise) — and runs at the GPU's fp8 tensor
// rate (torch._scaled_mm). torchtitan's filter leaves the output head in bf16 (filter_fqns = ["output"]) and torchao's
// leaves layers that are not nn.Linear (embeddings, norms) and those whose dimensions are not multiples of 16. With
// enable_fsdp_float8_all_gather (tensorwise only) FSDP2 all-gathers the fp8 weights, 1 byte per element, the scale
// computed from an amax all-reduced once per step (precompute_float8_dynamic_scale_for_fsdp).
enum class Fp8Scaling { none, tensorwise, rowwise };

// Bytes per element of every copy of the model state. Each recipe is an immutable value named as users say it.
struct PrecisionRecipe {
  std::string name;
  int param_storage_bytes = 4;    // the persistent (sharded, or replicated) parameter copy
  int param_compute_bytes = 4;    // the unsharded copy layers compute with; also the activation dtype
  int grad_compute_bytes = 4;     // gradients as backward produces them (unsharded)
  int reduce_bytes = 4;           // the dtype reduce-scatter / all-reduce run in
  int grad_storage_bytes = 4;     // the accumulated gradient each rank keeps (its shard, or all of it)
  int master_weight_bytes = 0;    // an extra fp32 copy of the parameters that the optimizer keeps
  int optimizer_state_bytes = 4;  // per optimizer state element (Adam's m and v)
  Fp8Scaling fp8 = Fp8Scaling::none;  // Note [Float8 training]: the blocks' projections in float8
  bool fp8_all_gather = false;        // their weights all-gathered in float8 (1 byte per element)
  bool uses_fp8() const { return fp8 != Fp8Scaling::none; }
};

// fp32; bf16-mixed as FSDP MixedPrecision(param_dtype=bf16, reduce_dtype=bf16) does it (fp32 sharded params and
// grads, bf16 all-gathered params and reductions); pure-bf16 (every copy bf16); zero-fp16 as in the ZeRO paper
// (Rajbhandari et al. 2020, §3.1: 2Ψ fp16 params, 2Ψ fp16 grads, KΨ optimizer with K = 12 for Adam:
// fp32 master weights, momentum and variance).
PrecisionRecipe precision_recipe(const std::string& name);  // InputError with the closest names when unknown
std::vector<std::string> precision_recipe_names();

// Note [8-bit optimizers]: bitsandbytes' AdamW8bit and PagedAdamW8bit (bitsandbytes/optim/adamw.py; both
// Optimizer2State with optim_bits=8, block_wise=True, min_8bit_size=4096). Optimizer2State.init_state
// (bitsandbytes/optim/optimizer.py) keeps m and v as uint8 codes, one byte per element each (state1, state2), and,
// block-wise, one fp32 absmax per block of 256 elements for each ("blocks = n // 256", absmax1 and absmax2): 2 bytes
// + 2 × 4 / 256 = 2.03125 bytes per element instead of 8. The two 256-entry fp32 code books (qmap1, qmap2) are
// shared by every parameter (name2qmap) and not counted. Not modelled: tensors under min_8bit_size (4096) elements
// keep fp32 states (the norms' weights: under 0.01 % of a decoder's parameters), and the blocks are counted over a
// rank's shard, not per tensor (at most one partial block, 8 bytes, per tensor). Paged: is_paged=True allocates the
// states in CUDA unified memory (get_state_buffer → F.get_paged), which the driver pages to host memory only when the
// device runs out; a plan that fits never pages, so the states are modelled on the device, as AdamW8bit's.
// The step reads and writes the states, their absmax values, the parameter and the gradient once each, at the GPU's
// memory bandwidth like the fused fp32 step (compute_cost.cpp optimizer_step_time_s).
// cpu_adamw: DeepSpeed's CPU-Adam (deepspeed.ops.adam.DeepSpeedCPUAdam) over offloaded fp32 states, AdamW's states
// and bytes, stepped in host memory only (Note [CPU optimizer step] in host_optimizer.h).
enum class OptimizerKind { adamw, sgd_momentum, sgd, adamw8bit, paged_adamw8bit, cpu_adamw };
// "adamw", "sgd-momentum", "sgd", "adamw8bit", "paged-adamw8bit", "cpu-adamw"
OptimizerKind optimizer_from_string(const std::string& name);
const char* to_string(OptimizerKind kind);
int optimizer_state_count(OptimizerKind kind);  // Adam: m and v; SGD with momentum: one buffer; plain SGD: none
bool is_8bit(OptimizerKind kind);               // Note [8-bit optimizers]
inline constexpr std::int64_t kBnbOptimizerBlockSize = 256;  // Optimizer2State.init_state: n // 256 blocks

// The ZeRO paper's K: optimizer-held bytes per parameter (master weights + states), less the 8-bit optimizers'
// quantisation constants (optimizer_held_bytes counts them).
int optimizer_bytes_per_param(const PrecisionRecipe& precision, OptimizerKind optimizer);
// What the optimizer holds for a shard of `elements` parameters: K bytes each, and for the 8-bit optimizers one fp32
// absmax per state per started block of 256 (Note [8-bit optimizers]).
std::int64_t optimizer_held_bytes(const PrecisionRecipe& precision, OptimizerKind optimizer, std::int64_t elements);
// The same per element, as a fraction: K + 2 × 4 / 256 for the 8-bit optimizers.
double optimizer_held_bytes_per_element(const PrecisionRecipe& precision, OptimizerKind optimizer);

}  // namespace shardplan
