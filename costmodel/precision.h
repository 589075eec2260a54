// Precision recipes (which dtype each copy of the model state is kept in) and optimizers (how many states per param).
#pragma once

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

enum class OptimizerKind { adamw, sgd_momentum, sgd };
OptimizerKind optimizer_from_string(const std::string& name);  // "adamw", "sgd-momentum", "sgd"
const char* to_string(OptimizerKind kind);
int optimizer_state_count(OptimizerKind kind);  // Adam: m and v; SGD with momentum: one buffer; plain SGD: none

// The ZeRO paper's K: optimizer-held bytes per parameter (master weights + states).
int optimizer_bytes_per_param(const PrecisionRecipe& precision, OptimizerKind optimizer);

}  // namespace shardplan
