// Test helpers for the Hugging Face example configs: the model examples/hf/NAME.json builds, and a tensor's shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "decoder_builder.h"
#include "hf_config.h"
#include "json_input.h"
#include "model_spec.h"

namespace shardplan::testing {

inline ModelSpec hf_model(const std::string& name) {
  const std::string path = "examples/hf/" + name + ".json";
  return build_decoder(name, architecture_from_hf_config(read_json_file(path), path), path);
}

// Whether the layer has a tensor of this name and shape.
inline bool has_tensor(const LayerSpec& layer, const std::string& name, const std::vector<std::int64_t>& shape) {
  for (const auto& tensor : layer.tensors) {
    if (tensor.name == name) return tensor.shape == shape;
  }
  return false;
}

}  // namespace shardplan::testing
