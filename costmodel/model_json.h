// Reading a shardplan model JSON (`shardplan.model/v1`): a high-level `architecture` block or an explicit `layers` list.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

// Two forms (see examples/models/):
//   {"schema": "shardplan.model/v1", "name": "...", "architecture": {"family": "llama"|"gpt2", "vocab_size", ...}}
//   {"schema": "shardplan.model/v1", "name": "...", "hidden_size", "num_heads", "vocab_size",
//    "layers": [{"name", "kind", "tensors": [{"name", "shape"}] | "params": N, "repeat": K, "tied_to": "layer",
//                "matmul_flops_per_token", "attention_flops_per_token_per_position",
//                "activation_elements_per_token", "activation_score_elements_per_token_per_position"}]}
// Every bad field is an InputError naming `origin` and the field path.
ModelSpec model_from_json(const nlohmann::json& document, const std::string& origin);

nlohmann::json to_json(const ModelSpec& model);  // a summary: name, params, layers with kind and param count

}  // namespace shardplan
