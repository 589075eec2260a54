// Flat parameter layout: tensor offsets per layer and layer offsets per model, and views binding them to buffers.
#include "param_layout.h"

#include "errors.h"
#include "finetune_apply.h"

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
  if (!layer.kernels) return layout;
  // Note [Fine-tuning layout]: the adapters after the base tensors.
  for (const ProjectionSpec& projection : layer.kernels->projections) {
    if (projection.lora_rank == 0) continue;
    const std::string path = projection_module_path(layer, projection);
    if (layer.kind != LayerKind::transformer_block || path.size() <= layer.name.size() + 1) {
      throw InputError("layer '" + layer.name + "': LoRA on '" + path + "' is not executed by the CPU runtime "
                       "(adapters on the transformer blocks' projections only)");
    }
    const std::string module = path.substr(layer.name.size() + 1);
    const std::int64_t r = projection.lora_rank, in = projection.in_features, out = projection.out_features;
    layout.tensors.push_back({module + ".lora_A.weight", {r, in}, layout.element_count, r * in});
    layout.element_count += r * in;
    layout.tensors.push_back({module + ".lora_B.weight", {out, r}, layout.element_count, out * r});
    layout.element_count += out * r;
  }
  return layout;
}

ModelLayout model_layout(const ModelSpec& model) {
  ModelLayout layout;
  for (std::size_t index = 0; index < model.layers.size(); ++index) {
    const LayerSpec& layer = model.layers[index];
    layout.layers.push_back(layer_layout(layer));
    if (layer.finetune) {
      // Note [Fine-tuning layout]: the base tensors come first, in spec order; the adapters after them train.
      std::int64_t trainable = 0;
      for (std::size_t slot = 0; slot < layout.layers.back().tensors.size(); ++slot) {
        TensorSlot& tensor = layout.layers.back().tensors[slot];
        tensor.trains = slot >= layer.tensors.size() || base_tensor_trains(model, layer, layer.tensors[slot]);
        if (tensor.trains) trainable += tensor.element_count;
      }
      SHARDPLAN_CHECK(trainable == layer.finetune->trainable_elements,
                      "layer '" + layer.name + "': the runtime layout trains " + std::to_string(trainable) +
                          " elements, its LayerFinetune " + std::to_string(layer.finetune->trainable_elements));
    }
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

UnitParamLayout unit_param_layout(const ModelLayout& model, std::vector<std::size_t> layers,
                                  std::int64_t frozen_offset_elements) {
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
  // Note [Trainable-first unit layout]: trainable tensors from 0, frozen ones from frozen_offset_elements.
  for (const std::size_t layer : unit.layers) {
    for (const TensorSlot& slot : model.layers[layer].tensors) {
      (slot.trains ? unit.trainable_elements : unit.frozen_elements) += slot.element_count;
    }
  }
  if (unit.frozen_elements == 0) frozen_offset_elements = unit.element_count;
  SHARDPLAN_CHECK(frozen_offset_elements >= unit.trainable_elements,
                  "frozen tensors placed at " + std::to_string(frozen_offset_elements) + ", inside the " +
                      std::to_string(unit.trainable_elements) + " trainable elements");
  unit.frozen_offset_elements = frozen_offset_elements;
  std::int64_t next_trainable = 0, next_frozen = frozen_offset_elements;
  for (const std::size_t layer : unit.layers) {
    unit.tensor_offsets_elements.emplace_back();
    for (const TensorSlot& slot : model.layers[layer].tensors) {
      std::int64_t& next = slot.trains ? next_trainable : next_frozen;
      unit.tensor_offsets_elements.back().push_back(next);
      next += slot.element_count;
    }
  }
  return unit;
}

namespace {

// Binds the owner of model layer `index` at its tensors' unit offsets; frozen tensors to nullptr when `grads`.
LayerParams bind_unit_tensors(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                              std::span<float> elements, bool grads) {
  SHARDPLAN_CHECK(index < model.param_owner.size(), "layer index out of range");
  const std::size_t owner = model.param_owner[index];
  for (std::size_t position = 0; position < unit.layers.size(); ++position) {
    if (unit.layers[position] != owner) continue;
    LayerParams params;
    const auto& slots = model.layers[owner].tensors;
    for (std::size_t slot = 0; slot < slots.size(); ++slot) {
      const std::int64_t offset = unit.tensor_offsets_elements[position][slot];
      float* data = nullptr;
      if (!grads || slots[slot].trains) {
        SHARDPLAN_CHECK(offset + slots[slot].element_count <= static_cast<std::int64_t>(elements.size()),
                        "tensor '" + slots[slot].name + "' lies outside the unit buffer bound to it");
        data = elements.data() + offset;
      }
      params.tensors.push_back({slots[slot].name, slots[slot].shape, data, slots[slot].element_count});
    }
    return params;
  }
  throw InternalError("layer " + std::to_string(index) + " (or the layer it is tied to) is not in this unit");
}

}  // namespace

LayerParams bind_unit_layer(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<float> unit_elements) {
  SHARDPLAN_CHECK(static_cast<std::int64_t>(unit_elements.size()) >= unit.extent_elements(),
                  "unit buffer is smaller than the unit layout");
  return bind_unit_tensors(model, unit, index, unit_elements, false);
}

LayerParams bind_unit_grads(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<float> grad_elements) {
  SHARDPLAN_CHECK(static_cast<std::int64_t>(grad_elements.size()) >= unit.trainable_elements,
                  "unit gradient buffer is smaller than the unit's trainable tensors");
  return bind_unit_tensors(model, unit, index, grad_elements, true);
}

LayerParams bind_unit_layer(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<const float> unit_elements) {
  return bind_unit_layer(model, unit, index,
                         std::span<float>(const_cast<float*>(unit_elements.data()), unit_elements.size()));
}

}  // namespace shardplan::runtime
