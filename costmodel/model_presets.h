// Built-in model presets: the architectures of well-known decoders, by name ("llama3-8b", "gpt2", "tiny-llama").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

struct ModelPreset {
  std::string name;
  std::string description;  // where the numbers come from
  DecoderArchitecture architecture;
  std::int64_t default_seq_len = 2048;  // the sequence length the model was trained at
  // A model that is no decoder alone (a vision tower spliced into its language model): its Hugging Face config,
  // read as a config file is (model_from_document in model_source.h); `architecture` is then unused.
  std::optional<nlohmann::json> hf_document = std::nullopt;
};

const std::vector<ModelPreset>& model_presets();
std::vector<std::string> model_preset_names();
std::optional<ModelPreset> find_model_preset(const std::string& name);

// Builds the ModelSpec of a preset; InputError with the closest names when unknown.
ModelSpec preset_model(const std::string& name);

}  // namespace shardplan
