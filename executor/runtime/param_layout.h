// Flat parameter layout: where each tensor of a layer (and each layer of a model) lives in one flat float buffer.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model_spec.h"

namespace shardplan::runtime {

// Note [Flat layout]: a layer's flat parameter is the concatenation of its LayerSpec tensors, in spec order, each
// row-major in its spec shape (Hugging Face [out, in] for linear weights). A model's flat parameter is the
// concatenation of its layers in order; an FSDP unit's flat parameter is the concatenation of its layers' slices, so
// a unit-relative offset is a model offset minus the offset of the unit's first layer. A tied layer owns no elements
// and reads the layer it is tied to. Gradients use exactly the same layout as the parameters they belong to.

struct TensorSlot {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset_elements = 0;  // from the start of the layer's slice
  std::int64_t element_count = 0;
};

struct LayerLayout {
  std::vector<TensorSlot> tensors;
  std::int64_t element_count = 0;
  const TensorSlot* find(std::string_view name) const;  // nullptr when absent
};
LayerLayout layer_layout(const LayerSpec& layer);

struct ModelLayout {
  std::vector<LayerLayout> layers;
  std::vector<std::int64_t> layer_offsets_elements;  // each layer's first element in the model's flat parameter
  std::vector<std::size_t> param_owner;               // layer whose elements layer i reads (itself unless tied)
  std::int64_t element_count = 0;
};
ModelLayout model_layout(const ModelSpec& model);

// The flat parameter of one FSDP unit: its layers' slices concatenated in the order listed (a root unit's layers need
// not be adjacent in the model, e.g. embedding, final norm and lm_head).
struct UnitParamLayout {
  std::vector<std::size_t> layers;                   // model layer indices
  std::vector<std::int64_t> layer_offsets_elements;  // each listed layer's first element in the unit's buffer
  std::int64_t element_count = 0;
};
// InternalError for an out-of-range or repeated layer, or a tied layer whose owner is not in the unit.
UnitParamLayout unit_param_layout(const ModelLayout& model, std::vector<std::size_t> layers);

// A view of one layer's tensors inside an external flat buffer (parameters, or gradients with the same layout).
// It does not own the buffer; the buffer must outlive the view.
struct BoundTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  float* data = nullptr;
  std::int64_t element_count = 0;
};

struct LayerParams {
  std::vector<BoundTensor> tensors;
  // The tensor called `name` with `shape`; InternalError when the layout has no such tensor (a kernel/spec mismatch).
  float* tensor(std::string_view name) const;
  const BoundTensor* find(std::string_view name) const;
};

// Binds `layout` onto `layer_elements`, which must hold exactly layout.element_count floats (the layer's slice).
LayerParams bind_layer(const LayerLayout& layout, std::span<float> layer_elements);
// Read-only binding: forward never writes parameters; the const is dropped only inside the view type.
LayerParams bind_layer(const LayerLayout& layout, std::span<const float> layer_elements);
// The view of model layer `index` (the owner's tensors for a tied layer) inside the whole model's flat buffer.
LayerParams bind_model_layer(const ModelLayout& layout, std::size_t index, std::span<float> model_elements);
LayerParams bind_model_layer(const ModelLayout& layout, std::size_t index, std::span<const float> model_elements);
// The view of model layer `index` (the owner's tensors for a tied layer) inside a unit's gathered flat buffer.
LayerParams bind_unit_layer(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<float> unit_elements);
LayerParams bind_unit_layer(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<const float> unit_elements);

}  // namespace shardplan::runtime
