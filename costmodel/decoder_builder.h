// Builds the ModelSpec of a llama-family or GPT-2 decoder from its architecture hyper-parameters.
#pragma once

#include <string>

#include "model_spec.h"

namespace shardplan {

// Validates the hyper-parameters (positive sizes, heads dividing the hidden size, kv heads dividing heads) and
// builds the layers: embedding(s), one transformer_block per layer, the final norm and the lm_head, named as the
// Hugging Face modules are ("model.layers.3", "transformer.h.3"). `origin` names the input in error messages.
ModelSpec build_decoder(const std::string& name, const DecoderArchitecture& architecture, const std::string& origin);

}  // namespace shardplan
