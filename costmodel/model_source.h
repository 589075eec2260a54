// Resolves the --model argument: a preset name, a shardplan model JSON, or a Hugging Face config.json.
#pragma once

#include <string>

#include "model_spec.h"

namespace shardplan {

// An existing file (or a name ending in .json) is read as JSON: a Hugging Face config when it has "architectures" or
// "model_type", else a shardplan model JSON; so is a document given inline (Note [Inline JSON] in json_input.h).
// Anything else is a preset name. InputError on every failure.
ModelSpec load_model(const std::string& model_argument);

}  // namespace shardplan
