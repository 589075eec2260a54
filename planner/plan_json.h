// Plan JSON (`shardplan.plan/v1`): reading with errors that name the unit and field, and writing.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "plan.h"

namespace shardplan {

// {"schema": "shardplan.plan/v1", "name", "model",
//  "training": {"seq_len", "micro_batch", "grad_accumulation_steps", "precision", "optimizer", "flash_attention",
//               "no_sync", "expert_parallel_degree" (optional), "torch_compile" (optional, false without it)},
//  "finetune": {...} (optional, full training without it: costmodel/finetune_json.h),
//  "max_inflight_all_gathers": 2, "offload": {"params": false, "optimizer": false},
//  "units": [{"name", "root": true|false, "first_layer", "last_layer" (inclusive; non-root only),
//             "strategy": "full_shard"|"hybrid_shard:8"|..., "reshard_after_forward": true|false|k,
//             "forward_prefetch": [ids], "backward_prefetch": [ids], "ac": "none"|"full"|"selective",
//             "ac_layers": ["none", "full", ...] (one per layer of the unit, overrides "ac")}]}
// The model gives the layer count that "ac" expands to; validate_plan runs after reading.
Plan plan_from_json(const nlohmann::json& document, const std::string& origin, const ModelSpec& model);
Plan read_plan_file(const std::string& path, const ModelSpec& model);
nlohmann::json to_json(const Plan& plan, const ModelSpec& model);

}  // namespace shardplan
