// Flat parameter layout: tensor offsets per layer and layer offsets per model, and views binding them to buffers.
#include "param_layout.h"

#include "errors.h"

namespace shardplan::runtime {

const TensorSlot* LayerLayout::find(std::string_view name) const {
  for (const auto& slot : tensors) {
    if (slot.name == name) return &slot;
  }
  return nullptr;
}

LayerLayout layer_layout(const LayerSpec& layer) {
  LayerLayout layout;
  for (const auto& tensor : layer.tensors) {
    const std::int64_t count = tensor.element_count();
    layout.tensors.push_back({tensor.name, tensor.shape, layout.element_count, count});
    layout.element_count += count;
  }
  return layout;
}

ModelLayout model_layout(const ModelSpec& model) {
  ModelLayout layout;
  for (std::size_t index = 0; index < model.layers.size(); ++index) {
    const LayerSpec& layer = model.layers[index];
    layout.layers.push_back(layer_layout(layer));
    layout.layer_offsets_elements.push_back(layout.element_count);
    layout.element_count += layout.layers.back().element_count;
    const std::size_t owner = layer.tied_to_layer.value_or(index);
    if (owner > index) {
      throw InputError("model '" + model.name + "': layer '" + layer.name + "' is tied to a later layer");
    }
    if (layer.tied_to_layer && !layer.tensors.empty()) {
      throw InputError("model '" + model.name + "': tied layer '" + layer.name + "' must own no tensors");
    }
    layout.param_owner.push_back(owner);
  }
  return layout;
}

const BoundTensor* LayerParams::find(std::string_view name) const {
  for (const auto& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

float* LayerParams::tensor(std::string_view name) const {
  const BoundTensor* found = find(name);
  SHARDPLAN_CHECK(found != nullptr, "layer view has no tensor '" + std::string(name) + "'");
  return found->data;
}

LayerParams bind_layer(const LayerLayout& layout, std::span<float> layer_elements) {
  SHARDPLAN_CHECK(static_cast<std::int64_t>(layer_elements.size()) == layout.element_count,
                  "layer buffer holds " + std::to_string(layer_elements.size()) + " floats, layout needs " +
                      std::to_string(layout.element_count));
  LayerParams params;
  for (const auto& slot : layout.tensors) {
    params.tensors.push_back({slot.name, slot.shape, layer_elements.data() + slot.offset_elements, slot.element_count});
  }
  return params;
}

LayerParams bind_layer(const LayerLayout& layout, std::span<const float> layer_elements) {
  // Kernels only read through a parameter view in forward; one view type keeps the kernel interface small.
  return bind_layer(layout, std::span<float>(const_cast<float*>(layer_elements.data()), layer_elements.size()));
}

LayerParams bind_model_layer(const ModelLayout& layout, std::size_t index, std::span<float> model_elements) {
  SHARDPLAN_CHECK(index < layout.layers.size(), "layer index out of range");
  SHARDPLAN_CHECK(static_cast<std::int64_t>(model_elements.size()) == layout.element_count,
                  "model buffer size does not match the layout");
  const std::size_t owner = layout.param_owner[index];
  const auto offset = static_cast<std::size_t>(layout.layer_offsets_elements[owner]);
  const auto count = static_cast<std::size_t>(layout.layers[owner].element_count);
  return bind_layer(layout.layers[owner], model_elements.subspan(offset, count));
}

LayerParams bind_model_layer(const ModelLayout& layout, std::size_t index, std::span<const float> model_elements) {
  return bind_model_layer(layout, index,
                          std::span<float>(const_cast<float*>(model_elements.data()), model_elements.size()));
}

UnitParamLayout unit_param_layout(const ModelLayout& model, std::vector<std::size_t> layers) {
  UnitParamLayout unit;
  unit.layers = std::move(layers);
  for (std::size_t position = 0; position < unit.layers.size(); ++position) {
    const std::size_t layer = unit.layers[position];
    SHARDPLAN_CHECK(layer < model.layers.size(), "unit layer index out of range");
    for (std::size_t earlier = 0; earlier < position; ++earlier) {
      SHARDPLAN_CHECK(unit.layers[earlier] != layer, "layer listed twice in a unit");
    }
    unit.layer_offsets_elements.push_back(unit.element_count);
    unit.element_count += model.layers[layer].element_count;
  }
  for (const std::size_t layer : unit.layers) {
    const std::size_t owner = model.param_owner[layer];
    bool owner_in_unit = false;
    for (const std::size_t member : unit.layers) owner_in_unit = owner_in_unit || member == owner;
    SHARDPLAN_CHECK(owner_in_unit, "tied layer " + std::to_string(layer) + " is not in its owner's unit");
  }
  return unit;
}

LayerParams bind_unit_layer(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<float> unit_elements) {
  SHARDPLAN_CHECK(static_cast<std::int64_t>(unit_elements.size()) == unit.element_count,
                  "unit buffer size does not match the unit layout");
  SHARDPLAN_CHECK(index < model.param_owner.size(), "layer index out of range");
  const std::size_t owner = model.param_owner[index];
  for (std::size_t position = 0; position < unit.layers.size(); ++position) {
    if (unit.layers[position] != owner) continue;
    const auto offset = static_cast<std::size_t>(unit.layer_offsets_elements[position]);
    const auto count = static_cast<std::size_t>(model.layers[owner].element_count);
    return bind_layer(model.layers[owner], unit_elements.subspan(offset, count));
  }
  throw InternalError("layer " + std::to_string(index) + " (or the layer it is tied to) is not in this unit");
}

LayerParams bind_unit_layer(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<const float> unit_elements) {
  return bind_unit_layer(model, unit, index,
                         std::span<float>(const_cast<float*>(unit_elements.data()), unit_elements.size()));
}

}  // namespace shardplan::runtime
