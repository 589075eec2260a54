// Import of a Hugging Face `config.json`: Llama, Mistral, Qwen2, GPT-2, Mixtral, Qwen2-MoE, Qwen3, Qwen3-MoE.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

// True when the document looks like a Hugging Face config (has "architectures" or "model_type").
bool looks_like_hf_config(const nlohmann::json& document);

// Reads the architecture from a parsed HF config; `origin` is the file name for error messages. Unknown
// architectures are an InputError listing the supported ones.
DecoderArchitecture architecture_from_hf_config(const nlohmann::json& document, const std::string& origin);

}  // namespace shardplan
