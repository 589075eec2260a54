// Fine-tuning in the runtime's flat layout: LoRA adapters as layer tensors with PEFT's names, shapes and init, frozen
// tensors marked, and a unit's trainable-first layout whose gradient view leaves frozen tensors without a gradient.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "errors.h"
#include "finetune_apply.h"
#include "model_runtime.h"
#include "param_layout.h"
#include "runtime_fixtures.h"

namespace {

using namespace shardplan;
using namespace shardplan::runtime;
using namespace shardplan::runtime::testing;

ModelSpec lora_tiny_model(std::int64_t r) {
  FinetuneConfig lora;
  lora.mode = FinetuneMode::lora;
  lora.lora.r = r;
  lora.lora.target_modules = {"q_proj", "down_proj"};
  return finetuned_model(tiny_model(true), lora, FinetuneFieldNames::cli());
}

}  // namespace

TEST_CASE("LoRA adapters follow a block's base tensors, named and shaped as PEFT's, initialised as PEFT's") {
  const ModelRuntime runtime(lora_tiny_model(3));
  const ModelLayout& model = runtime.layout();
  const LayerLayout& block = model.layers[1];
  const TensorSlot* a = block.find("self_attn.q_proj.lora_A.weight");
  const TensorSlot* b = block.find("mlp.down_proj.lora_B.weight");
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  const DecoderDims dims = runtime.dims();
  CHECK(a->shape == std::vector<std::int64_t>{3, dims.hidden_size});
  CHECK(b->shape == std::vector<std::int64_t>{dims.hidden_size, 3});
  CHECK(block.find("self_attn.k_proj.lora_A.weight") == nullptr);  // not a target
  // Every base tensor frozen, every adapter trains, the adapters after the base tensors.
  std::int64_t trainable = 0;
  for (const TensorSlot& slot : block.tensors) {
    const bool adapter = slot.name.find(".lora_") != std::string::npos;
    CHECK(slot.trains == adapter);
    if (adapter) {
      trainable += slot.element_count;
      CHECK(slot.offset_elements >= runtime.model().layers[1].param_count());
    }
  }
  CHECK(trainable == runtime.model().layers[1].finetune->trainable_elements);
  // PEFT's init: lora_A uniform within ±1/√in (and not all zero), lora_B zeros.
  const std::vector<float> params = runtime.init_parameters(3);
  const auto at = [&](const TensorSlot& slot, std::int64_t i) {
    return params[static_cast<std::size_t>(model.layer_offsets_elements[1] + slot.offset_elements + i)];
  };
  const double bound = 1.0 / std::sqrt(static_cast<double>(dims.hidden_size));
  double largest = 0;
  for (std::int64_t i = 0; i < a->element_count; ++i) largest = std::max(largest, std::abs(double{at(*a, i)}));
  CHECK(largest <= bound);
  CHECK(largest > 0.5 * bound);
  for (std::int64_t i = 0; i < b->element_count; ++i) CHECK(at(*b, i) == 0.0f);
}

TEST_CASE("a unit with frozen tensors: trainable tensors first, frozen ones from the offset; grads bind frozen to null") {
  const ModelRuntime runtime(lora_tiny_model(2));
  const ModelLayout& model = runtime.layout();
  const UnitParamLayout unit = unit_param_layout(model, {1}, 160);
  const LayerLayout& block = model.layers[1];
  CHECK(unit.trainable_elements + unit.frozen_elements == block.element_count);
  CHECK(unit.trainable_elements == 144);  // q_proj 2·16 + 16·2, down_proj 2·24 + 16·2
  CHECK(unit.frozen_offset_elements == 160);
  CHECK(unit.extent_elements() == 160 + unit.frozen_elements);
  CHECK_THROWS_AS(unit_param_layout(model, {1}, unit.trainable_elements - 1), InternalError);
  std::vector<float> buffer(static_cast<std::size_t>(unit.extent_elements()));
  std::vector<float> grads(static_cast<std::size_t>(unit.trainable_elements));
  const LayerParams params = bind_unit_layer(model, unit, 1, std::span<float>(buffer));
  const LayerParams grad_view = bind_unit_grads(model, unit, 1, std::span<float>(grads));
  std::int64_t next_trainable = 0, next_frozen = 160;
  for (const TensorSlot& slot : block.tensors) {
    INFO(slot.name);
    std::int64_t& next = slot.trains ? next_trainable : next_frozen;
    CHECK(params.tensor(slot.name) == buffer.data() + next);
    CHECK(grad_view.tensor(slot.name) == (slot.trains ? grads.data() + next : nullptr));
    next += slot.element_count;
  }
  CHECK(next_trainable == unit.trainable_elements);
}
