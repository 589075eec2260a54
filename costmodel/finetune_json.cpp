// Reading and writing the plan JSON's "finetune" block.
#include "finetune_json.h"

#include "errors.h"
#include "finetune_apply.h"

namespace shardplan {
namespace {

constexpr std::int64_t kFinetuneBlockVersion = 1;

DType read_dtype(const JsonObjectReader& block, const char* key, const std::vector<DType>& allowed) {
  const std::string text = block.string(key);
  try {
    return dtype_from_string(text, allowed);
  } catch (const InputError&) {
    std::string names;
    for (DType dtype : allowed) names += (names.empty() ? "\"" : ", \"") + std::string(to_string(dtype)) + "\"";
    block.fail(key, names);
  }
}

std::vector<std::string> read_strings(const JsonObjectReader& block, const char* key, const char* expected) {
  std::vector<std::string> items;
  for (const auto& value : block.array(key)) {
    if (!value.is_string()) block.fail(key, expected);
    items.push_back(value.get<std::string>());
  }
  return items;
}

}  // namespace

FinetuneConfig finetune_from_json(const JsonObjectReader& block, const PrecisionRecipe& precision) {
  block.reject_unknown_keys({"version", "mode", "freeze", "lora", "bnb_4bit", "fsdp_version", "use_orig_params"});
  if (block.int_in_range("version", kFinetuneBlockVersion, kFinetuneBlockVersion) != kFinetuneBlockVersion) {
    block.fail("version", "1");
  }
  FinetuneConfig config;
  try {
    config.mode = finetune_mode_from_string(block.string("mode"));
  } catch (const InputError&) {
    block.fail("mode", "\"full\", \"frozen\", \"lora\" or \"qlora\"");
  }
  if (block.has("freeze")) config.freeze = read_strings(block, "freeze", "an array of name patterns");
  if (block.has("lora")) {
    if (!config.uses_lora()) block.fail("lora", "no \"lora\" block unless mode is \"lora\" or \"qlora\"");
    const JsonObjectReader lora = block.object("lora");
    lora.reject_unknown_keys({"r", "alpha", "dropout", "target_modules"});
    config.lora.r = lora.optional_int_in_range("r", 1, 1 << 20).value_or(config.lora.r);
    config.lora.alpha = lora.optional_number_in_range("alpha", 1e-9, 1e9).value_or(config.lora.alpha);
    config.lora.dropout = lora.optional_number_in_range("dropout", 0, 0.999999).value_or(config.lora.dropout);
    if (lora.has("target_modules")) {
      config.lora.target_modules = read_strings(lora, "target_modules", "an array of module names");
    }
  }
  if (block.has("bnb_4bit")) {
    if (config.mode != FinetuneMode::qlora) block.fail("bnb_4bit", "no \"bnb_4bit\" block unless mode is \"qlora\"");
    const JsonObjectReader bnb = block.object("bnb_4bit");
    bnb.reject_unknown_keys({"quant_type", "use_double_quant", "quant_storage", "compute_dtype"});
    config.bnb.quant_type = bnb.optional_string("quant_type").value_or("nf4");
    config.bnb.use_double_quant = bnb.boolean("use_double_quant", false);
    if (bnb.has("quant_storage")) {
      config.bnb.quant_storage = read_dtype(bnb, "quant_storage", {DType::uint8, DType::bf16, DType::fp16, DType::fp32});
    }
    if (bnb.has("compute_dtype")) {
      config.bnb.compute_dtype = read_dtype(bnb, "compute_dtype", {DType::bf16, DType::fp16, DType::fp32});
    }
  }
  config.fsdp.version = static_cast<int>(block.optional_int_in_range("fsdp_version", 1, 2).value_or(2));
  config.fsdp.use_orig_params = block.boolean("use_orig_params", true);
  validate_finetune(config, precision, FinetuneFieldNames::json(block.origin()));
  return config;
}

nlohmann::json finetune_to_json(const FinetuneConfig& config, const PrecisionRecipe& precision, const ModelSpec& model) {
  nlohmann::json block = {{"version", kFinetuneBlockVersion},
                          {"mode", to_string(config.mode)},
                          {"fsdp_version", config.fsdp.version},
                          {"use_orig_params", config.fsdp.use_orig_params}};
  if (config.mode == FinetuneMode::frozen) block["freeze"] = config.freeze;
  if (config.uses_lora()) {
    block["lora"] = {{"r", config.lora.r},
                     {"alpha", config.lora.alpha},
                     {"dropout", config.lora.dropout},
                     {"target_modules", lora_target_modules(model, config)}};
  }
  if (config.mode == FinetuneMode::qlora) {
    block["bnb_4bit"] = {{"quant_type", config.bnb.quant_type},
                         {"use_double_quant", config.bnb.use_double_quant},
                         {"quant_storage", to_string(config.quant_storage(precision))},
                         {"compute_dtype", to_string(config.quant_compute(precision))}};
  }
  return block;
}

}  // namespace shardplan
