// Resolves the --model argument: a preset name, a shardplan model JSON, or a Hugging Face config.json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

// An existing file (or a name ending in .json) is read as JSON: a Hugging Face config when it has "architectures" or
// "model_type", else a shardplan model JSON; so is a document given inline (Note [Inline JSON] in json_input.h).
// "org/name" (or "org/name@revision") that is no file is a Hugging Face Hub id, read from the local Hugging Face
// cache (Note [Hub ids] in hf_hub_cache.h). Anything else is a preset name. InputError on every failure.
ModelSpec load_model(const std::string& model_argument);

// The JSON file at `path`, read as load_model reads one; `name` names the model (empty: the file's stem, or its
// folder's name for a config.json).
ModelSpec load_model_file(const std::string& path, const std::string& name);

// A parsed JSON document as load_model reads one: a Hugging Face config goes to the reader of its class (a vision
// encoder, LLaVA, Gemma 3 multimodal, Qwen2-VL / Qwen2.5-VL, Llama 4, else the decoder import), anything else is a
// shardplan model JSON. `name` names a Hugging Face model (empty: "hf-model"); `origin` names the input in errors.
ModelSpec model_from_document(const nlohmann::json& document, const std::string& name, const std::string& origin);

}  // namespace shardplan
