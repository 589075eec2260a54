// FinetuneConfig names, dtypes and the checks that need no model (ranges, front end, QLoRA's dtype rules).
#include "finetune.h"

#include <cmath>

#include "errors.h"
#include "name_suggest.h"

namespace shardplan {

const char* to_string(FinetuneMode mode) {
  switch (mode) {
    case FinetuneMode::full: return "full";
    case FinetuneMode::frozen: return "frozen";
    case FinetuneMode::lora: return "lora";
    case FinetuneMode::qlora: return "qlora";
  }
  return "full";
}

FinetuneMode finetune_mode_from_string(const std::string& text) {
  for (auto mode : {FinetuneMode::full, FinetuneMode::frozen, FinetuneMode::lora, FinetuneMode::qlora}) {
    if (text == to_string(mode)) return mode;
  }
  throw InputError("--finetune '" + text + "': expected full, frozen, lora or qlora" +
                   did_you_mean(text, {"full", "frozen", "lora", "qlora"}));
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::uint8: return "uint8";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp32: return "fp32";
  }
  return "fp32";
}

int dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::uint8: return 1;
    case DType::bf16:
    case DType::fp16: return 2;
    case DType::fp32: return 4;
  }
  return 4;
}

DType dtype_from_string(const std::string& text, const std::vector<DType>& allowed) {
  std::vector<std::string> names;
  for (DType dtype : allowed) {
    if (text == to_string(dtype)) return dtype;
    names.push_back(to_string(dtype));
  }
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
  throw InputError("'" + text + "': expected one of " + list + did_you_mean(text, names));
}

namespace {

DType dtype_of_width(int bytes, const std::string& recipe) {
  if (bytes >= 4) return DType::fp32;
  return recipe.find("fp16") != std::string::npos ? DType::fp16 : DType::bf16;
}

}  // namespace

DType param_dtype(const PrecisionRecipe& precision) {
  return dtype_of_width(precision.param_compute_bytes, precision.name);
}

DType storage_dtype(const PrecisionRecipe& precision) {
  return dtype_of_width(precision.param_storage_bytes, precision.name);
}

DType FinetuneConfig::quant_storage(const PrecisionRecipe& precision) const {
  return bnb.quant_storage.value_or(param_dtype(precision));
}

DType FinetuneConfig::quant_compute(const PrecisionRecipe& precision) const {
  return bnb.compute_dtype.value_or(param_dtype(precision));
}

FinetuneFieldNames FinetuneFieldNames::cli() {
  return {"--finetune",       "--freeze",     "--lora-r",
          "--lora-alpha",     "--lora-dropout", "--lora-target-modules",
          "--bnb-4bit-quant-type", "--bnb-4bit-use-double-quant", "--bnb-4bit-quant-storage",
          "--bnb-4bit-compute-dtype", "--fsdp-version", "--use-orig-params"};
}

FinetuneFieldNames FinetuneFieldNames::json(const std::string& origin) {
  const auto field = [&](const std::string& path) { return origin + ": field 'finetune." + path + "'"; };
  return {field("mode"),
          field("freeze"),
          field("lora.r"),
          field("lora.alpha"),
          field("lora.dropout"),
          field("lora.target_modules"),
          field("bnb_4bit.quant_type"),
          field("bnb_4bit.use_double_quant"),
          field("bnb_4bit.quant_storage"),
          field("bnb_4bit.compute_dtype"),
          field("fsdp_version"),
          field("use_orig_params")};
}

void validate_finetune(const FinetuneConfig& config, const PrecisionRecipe& precision, const FinetuneFieldNames& names) {
  if (config.mode == FinetuneMode::frozen && config.freeze.empty()) {
    throw InputError(names.mode + " frozen: expected at least one " + names.freeze + " pattern");
  }
  if (config.mode != FinetuneMode::frozen && !config.freeze.empty()) {
    throw InputError(names.freeze + ": only with " + names.mode + " frozen (" + to_string(config.mode) +
                     (config.uses_lora() ? " freezes every base parameter already)" : " trains every parameter)"));
  }
  for (const std::string& pattern : config.freeze) {
    if (pattern.empty()) throw InputError(names.freeze + ": expected a non-empty name pattern");
  }
  // A rank past the widest layer of any model the limits admit is a typo (limits::kMaxHiddenSize is 2^20).
  constexpr std::int64_t kMostRank = 1 << 20;
  if (config.lora.r < 1 || config.lora.r > kMostRank) {
    throw InputError(names.r + " " + std::to_string(config.lora.r) + ": expected a rank from 1 to " +
                     std::to_string(kMostRank));
  }
  if (!std::isfinite(config.lora.alpha) || config.lora.alpha <= 0) {
    throw InputError(names.alpha + ": expected a positive number");
  }
  if (!std::isfinite(config.lora.dropout) || config.lora.dropout < 0 || config.lora.dropout >= 1) {
    throw InputError(names.dropout + ": expected a probability 0 <= p < 1");
  }
  for (const std::string& target : config.lora.target_modules) {
    if (target.empty()) throw InputError(names.target_modules + ": expected module names such as q_proj,v_proj");
  }
  if (config.bnb.quant_type != "nf4" && config.bnb.quant_type != "fp4") {
    throw InputError(names.quant_type + " '" + config.bnb.quant_type + "': expected nf4 or fp4" +
                     did_you_mean(config.bnb.quant_type, {"nf4", "fp4"}));
  }
  if (config.fsdp.version != 1 && config.fsdp.version != 2) {
    throw InputError(names.fsdp_version + " " + std::to_string(config.fsdp.version) + ": expected 1 or 2");
  }
  if (config.fsdp.version == 2 && !config.fsdp.use_orig_params) {
    throw InputError(names.use_orig_params + " false: an FSDP1 setting; expected " + names.fsdp_version +
                     " 1 with it (FSDP2 keeps the original parameters)");
  }
  if (config.mode != FinetuneMode::qlora) return;
  // Note [QLoRA storage dtype].
  const DType gathered = param_dtype(precision);
  const DType stored = config.quant_storage(precision);
  if (stored != gathered) {
    throw InputError(names.quant_storage + " " + to_string(stored) + ": expected " + to_string(gathered) +
                     ", the dtype FSDP all-gathers under --precision " + precision.name +
                     " (its param_dtype would cast the packed 4-bit weights into other numbers; answer.ai fsdp_qlora: "
                     "quant_storage must match the FSDP param_dtype)");
  }
  if (config.fsdp.version == 1 && storage_dtype(precision) != gathered) {
    throw InputError(names.fsdp_version + " 1 with QLoRA: FSDP1 flattens a unit into one FlatParameter of one dtype, "
                     "so the parameters must be stored in the quant storage dtype " + std::string(to_string(stored)) +
                     ", expected --precision pure-bf16 or fp32 (fsdp_qlora's --precision bf16 or fp32), got " +
                     precision.name);
  }
}

}  // namespace shardplan
