// Test helpers for the Hugging Face example configs: the model examples/hf/NAME.json builds, the model a config
// document builds, a tensor's shape, a layer by name and the parameters under a name prefix.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "decoder_builder.h"
#include "hf_config.h"
#include "json_input.h"
#include "model_source.h"
#include "model_spec.h"

namespace shardplan::testing {

inline ModelSpec hf_model(const std::string& name) {
  const std::string path = "examples/hf/" + name + ".json";
  return build_decoder(name, architecture_from_hf_config(read_json_file(path), path), path);
}

// The model load_model builds from a config document: the reader its class names (model_from_document).
inline ModelSpec config_model(const nlohmann::json& document) {
  return model_from_document(document, "hf-test", "config.json");
}

// Whether the layer has a tensor of this name and shape.
inline bool has_tensor(const LayerSpec& layer, const std::string& name, const std::vector<std::int64_t>& shape) {
  for (const auto& tensor : layer.tensors) {
    if (tensor.name == name) return tensor.shape == shape;
  }
  return false;
}

// The layer of this name; a test failure when there is none.
inline const LayerSpec& layer_named(const ModelSpec& model, const std::string& name) {
  for (const LayerSpec& layer : model.layers) {
    if (layer.name == name) return layer;
  }
  FAIL("no layer " << name);
  throw std::logic_error("unreachable");
}

// Parameters of the layers whose names start with `prefix`.
inline std::int64_t params_under(const ModelSpec& model, const std::string& prefix) {
  std::int64_t total = 0;
  for (const LayerSpec& layer : model.layers) {
    if (layer.name.starts_with(prefix)) total += layer.param_count();
  }
  return total;
}

}  // namespace shardplan::testing
