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
//
// Note [Fine-tuning layout]: under a fine-tuning config (ModelSpec::finetune, costmodel/finetune_apply.h) each base
// tensor is marked trains or frozen (base_tensor_trains), and a layer's LoRA adapters follow its base tensors, one
// pair per targeted projection in forward order, named relative to the layer as PEFT names them
// ("self_attn.q_proj.lora_A.weight" [r × in], "self_attn.q_proj.lora_B.weight" [out × r]: peft/tuners/lora/layer.py,
// lora_A = nn.Linear(in_features, r, bias=False), lora_B = nn.Linear(r, out_features, bias=False)). Adapters train.
// The trainable elements of each layer equal its LayerFinetune::trainable_elements (checked: InternalError).

struct TensorSlot {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset_elements = 0;  // from the start of the layer's slice
  std::int64_t element_count = 0;
  bool trains = true;  // Note [Fine-tuning layout]
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
//
// Note [Trainable-first unit layout]: a unit with frozen tensors (fine-tuning) places every tensor that trains first,
// in unit order, from element 0, and every frozen tensor after them, in unit order, from frozen_offset_elements — the
// trainable region padded to the shard group, so the gradient (which covers the trainable region only, FSDP2's
// per-parameter gradients: Note [Frozen parameters in FSDP] in planner/unit_layout.h) binds the trainable tensors at
// the same offsets as the parameters. Without frozen tensors the order is the contiguous one of layer slices above.
struct UnitParamLayout {
  std::vector<std::size_t> layers;                   // model layer indices
  // Each listed layer's first element in the unit's buffer: the contiguous layout of a unit without frozen tensors
  // (the GPU executor's, which runs full training only).
  std::vector<std::int64_t> layer_offsets_elements;
  std::int64_t element_count = 0;
  // Per listed layer, each of its (owner's) tensors' first element in the unit's buffer (Note [Trainable-first unit
  // layout]); the tied layer's entry is empty.
  std::vector<std::vector<std::int64_t>> tensor_offsets_elements;
  std::int64_t trainable_elements = 0;      // of the tensors that train
  std::int64_t frozen_elements = 0;         // of the frozen ones
  std::int64_t frozen_offset_elements = 0;  // where the frozen tensors begin (element_count without any)
  // The buffer the layout needs: the frozen region's end, or element_count.
  std::int64_t extent_elements() const { return frozen_offset_elements + frozen_elements; }
};
// InternalError for an out-of-range or repeated layer, a tied layer whose owner is not in the unit, or a
// frozen_offset_elements below the trainable elements. `frozen_offset_elements` places the frozen tensors (Note
// [Trainable-first unit layout]); it is ignored when the unit has none.
UnitParamLayout unit_param_layout(const ModelLayout& model, std::vector<std::size_t> layers,
                                  std::int64_t frozen_offset_elements = 0);

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
// The view of model layer `index` (the owner's tensors for a tied layer) inside a unit's gathered flat buffer, which
// holds at least unit.extent_elements() floats.
LayerParams bind_unit_layer(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<float> unit_elements);
LayerParams bind_unit_layer(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<const float> unit_elements);
// The gradient view of the same layer inside a unit's gradient buffer (its trainable region, at least
// unit.trainable_elements floats): trainable tensors at their parameter offsets, frozen ones with data == nullptr —
// the kernels compute no gradient for those (the weight-gradient GEMM a frozen weight skips).
LayerParams bind_unit_grads(const ModelLayout& model, const UnitParamLayout& unit, std::size_t index,
                            std::span<float> grad_elements);

}  // namespace shardplan::runtime
