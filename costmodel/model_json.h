// Reading a shardplan model JSON (`shardplan.model/v1`): a high-level `architecture` block or an explicit `layers` list.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

// Two forms (see examples/models/):
//   {"schema": "shardplan.model/v1", "name": "...", "architecture": {"family": "llama"|"gpt2", "vocab_size", ...}}
//   {"schema": "shardplan.model/v1", "name": "...", "hidden_size", "num_heads", "vocab_size", "max_positions",
//    "layers": [{"name", "kind", "tensors": [{"name", "shape"}] | "params": N, "repeat": K, "tied_to": "layer",
//                "matmul_flops_per_token", "attention_flops_per_token_per_position",
//                "activation_elements_per_token", "activation_score_elements_per_token_per_position",
//                "flops", "activations", "kernels", "moe"}]}
// A layer's "flops", "activations", "kernels" and "moe" objects (Note [Exact layers] in layer_json.h) give its exact
// description over the flat keys' defaults; "flops": {"attention_window": W} alone makes a sliding-window layer
// ("attention_chunked": true, a Llama 4 chunk of W). Every bad field is an InputError naming `origin` and the field path.
ModelSpec model_from_json(const nlohmann::json& document, const std::string& origin);

// The model as an explicit-layer document that model_from_json reads back as the same layers (Note [Exact layers]):
// name, params, hidden_size, num_heads, vocab_size, default_seq_len, max_positions (the --seq-len bound, Note [Long
// context]) and each layer's tensors (or tied_to) and detail. The DecoderArchitecture is not written: a model read
// back has none, so what needs one refuses it as for any explicit-layer file (tensor and context parallelism, the
// runtimes).
nlohmann::json to_json(const ModelSpec& model);

}  // namespace shardplan
