// The precision recipe table and optimizer state counts.
#include "precision.h"

#include "errors.h"
#include "name_suggest.h"

namespace shardplan {
namespace {

std::vector<PrecisionRecipe> recipes() {
  // {name, param storage, param compute, grad compute, reduce, grad storage, master, optimizer state, fp8, fp8 gather}
  constexpr Fp8Scaling none = Fp8Scaling::none;
  return {
      {"fp32", 4, 4, 4, 4, 4, 0, 4, none, false},
      // FSDP1 MixedPrecision keeps the sharded flat parameter in fp32, casts it to bf16 before the all-gather and
      // casts the reduced bf16 gradient shard back to fp32 (torch/distributed/fsdp/_flat_param.py, _runtime_utils.py).
      {"bf16-mixed", 4, 2, 2, 2, 4, 0, 4, none, false},
      // FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), torchtitan's default
      // (torchtitan/config/job_config.py, mixed_precision_reduce = "float32"): bf16 all-gathers and layers, gradients
      // produced and reduced in fp32. What the GPU executor runs (executor/gpu/runner).
      {"bf16-mixed-fp32-reduce", 4, 2, 4, 4, 4, 0, 4, none, false},
      {"pure-bf16", 2, 2, 2, 2, 2, 0, 2, none, false},
      // ZeRO §3.1 mixed-precision Adam: fp16 params and grads; fp32 master copy + momentum + variance: K = 4+4+4 = 12.
      {"zero-fp16", 2, 2, 2, 2, 2, 4, 4, none, false},
      // Note [Float8 training]: torchtitan's float8 runs on its bf16-mixed-fp32-reduce base. Tensorwise with the fp8
      // all-gather (torchtitan [float8] enable_fsdp_float8_all_gather); rowwise all-gathers bf16 (torchao supports
      // the fp8 all-gather for tensorwise scaling only).
      {"fp8-tensorwise", 4, 2, 4, 4, 4, 0, 4, Fp8Scaling::tensorwise, true},
      {"fp8-rowwise", 4, 2, 4, 4, 4, 0, 4, Fp8Scaling::rowwise, false},
  };
}

}  // namespace

std::vector<std::string> precision_recipe_names() {
  std::vector<std::string> names;
  for (const auto& recipe : recipes()) names.push_back(recipe.name);
  return names;
}

PrecisionRecipe precision_recipe(const std::string& name) {
  for (const auto& recipe : recipes()) {
    if (recipe.name == name) return recipe;
  }
  std::string known;
  for (const std::string& recipe : precision_recipe_names()) known += (known.empty() ? "" : ", ") + recipe;
  throw InputError("unknown precision '" + name + "'" + did_you_mean(name, precision_recipe_names()) + " (known: " +
                   known + ")");
}

OptimizerKind optimizer_from_string(const std::string& name) {
  if (name == "adamw" || name == "adam") return OptimizerKind::adamw;
  if (name == "sgd-momentum") return OptimizerKind::sgd_momentum;
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "adamw8bit") return OptimizerKind::adamw8bit;
  if (name == "paged-adamw8bit") return OptimizerKind::paged_adamw8bit;
  if (name == "cpu-adamw") return OptimizerKind::cpu_adamw;
  throw InputError("--optimizer '" + name +
                   "': expected adamw, sgd-momentum, sgd, adamw8bit, paged-adamw8bit or cpu-adamw" +
                   did_you_mean(name, {"adamw", "sgd-momentum", "sgd", "adamw8bit", "paged-adamw8bit", "cpu-adamw"}));
}

const char* to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::sgd_momentum: return "sgd-momentum";
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::adamw8bit: return "adamw8bit";
    case OptimizerKind::paged_adamw8bit: return "paged-adamw8bit";
    case OptimizerKind::cpu_adamw: return "cpu-adamw";
  }
  return "adamw";
}

int optimizer_state_count(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adamw:
    case OptimizerKind::cpu_adamw:
    case OptimizerKind::adamw8bit:
    case OptimizerKind::paged_adamw8bit: return 2;
    case OptimizerKind::sgd_momentum: return 1;
    case OptimizerKind::sgd: return 0;
  }
  return 0;
}

bool is_8bit(OptimizerKind kind) {
  return kind == OptimizerKind::adamw8bit || kind == OptimizerKind::paged_adamw8bit;
}

int optimizer_bytes_per_param(const PrecisionRecipe& precision, OptimizerKind optimizer) {
  // Note [8-bit optimizers]: uint8 states whatever the recipe's state dtype.
  const int state_bytes = is_8bit(optimizer) ? 1 : precision.optimizer_state_bytes;
  return precision.master_weight_bytes + optimizer_state_count(optimizer) * state_bytes;
}

std::int64_t optimizer_held_bytes(const PrecisionRecipe& precision, OptimizerKind optimizer, std::int64_t elements) {
  std::int64_t bytes = elements * optimizer_bytes_per_param(precision, optimizer);
  if (is_8bit(optimizer)) {
    const std::int64_t blocks = (elements + kBnbOptimizerBlockSize - 1) / kBnbOptimizerBlockSize;
    bytes += optimizer_state_count(optimizer) * 4 * blocks;  // fp32 absmax1, absmax2
  }
  return bytes;
}

double optimizer_held_bytes_per_element(const PrecisionRecipe& precision, OptimizerKind optimizer) {
  const double constants =
      is_8bit(optimizer) ? optimizer_state_count(optimizer) * 4.0 / static_cast<double>(kBnbOptimizerBlockSize) : 0.0;
  return optimizer_bytes_per_param(precision, optimizer) + constants;
}

}  // namespace shardplan
