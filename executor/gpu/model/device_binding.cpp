// bind_device_layer / bind_device_grads: a LayerLayout's tensor offsets applied to device buffers.
#include "device_binding.h"

#include "errors.h"

namespace shardplan::gpu {

DeviceLayerParams bind_device_layer(const runtime::LayerLayout& layout, const void* layer_data, DeviceDType dtype) {
  SHARDPLAN_CHECK(layer_data != nullptr || layout.element_count == 0, "binding a layer to a null device buffer");
  DeviceLayerParams params;
  const auto* bytes = static_cast<const unsigned char*>(layer_data);
  for (const auto& slot : layout.tensors) {
    params.tensors.push_back(
        {slot.name, slot.shape, bytes + slot.offset_elements * element_bytes(dtype), dtype, slot.element_count});
  }
  return params;
}

DeviceLayerGrads bind_device_grads(const runtime::LayerLayout& layout, float* layer_grads) {
  SHARDPLAN_CHECK(layer_grads != nullptr || layout.element_count == 0, "binding gradients to a null device buffer");
  DeviceLayerGrads grads;
  for (const auto& slot : layout.tensors) {
    grads.tensors.push_back({slot.name, layer_grads + slot.offset_elements, slot.element_count});
  }
  return grads;
}

}  // namespace shardplan::gpu
