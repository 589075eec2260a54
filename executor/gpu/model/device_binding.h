// Views of one layer's parameters and gradients inside device flat buffers (Note [Flat layout] in param_layout.h):
// the device counterparts of runtime::bind_layer.
#pragma once

#include <cstdint>

#include "device_layer.h"
#include "param_layout.h"

namespace shardplan::gpu {

// The tensors of `layout` inside `layer_data`, the layer's slice of a gathered flat parameter in `dtype` (the slice
// must hold layout.element_count elements: the layout's offsets are in elements, whatever their size). For a tied
// layer pass the owner's layout and slice, as runtime::bind_model_layer does.
DeviceLayerParams bind_device_layer(const runtime::LayerLayout& layout, const void* layer_data, DeviceDType dtype);

// The same layout over an fp32 gradient slice.
DeviceLayerGrads bind_device_grads(const runtime::LayerLayout& layout, float* layer_grads);

}  // namespace shardplan::gpu
