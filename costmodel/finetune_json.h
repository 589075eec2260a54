// The plan JSON's "finetune" block (version 1): reading with errors that name the field, and writing.
#pragma once

#include <nlohmann/json.hpp>

#include "finetune.h"
#include "json_input.h"
#include "model_spec.h"

namespace shardplan {

// {"version": 1, "mode": "full"|"frozen"|"lora"|"qlora", "freeze": ["model.embed_tokens*", ...],
//  "lora": {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", ...]},
//  "bnb_4bit": {"quant_type": "nf4", "use_double_quant": true, "quant_storage": "bf16", "compute_dtype": "bf16"},
//  "fsdp_version": 2, "use_orig_params": true}
// Unknown keys, a block that does not belong to the mode ("lora" under "frozen"), and any value validate_finetune
// refuses under `precision` fail naming the field. The model-dependent checks (patterns that match nothing, unknown
// target modules) are finetuned_model's (finetune_apply.h).
FinetuneConfig finetune_from_json(const JsonObjectReader& block, const PrecisionRecipe& precision);

// The block for `config` on `model`: the LoRA targets and 4-bit dtypes in force written out, not left to defaults.
nlohmann::json finetune_to_json(const FinetuneConfig& config, const PrecisionRecipe& precision, const ModelSpec& model);

}  // namespace shardplan
