// Buffers of the device layers: fp32 activation and scratch buffers from the pool, device copies, and the fp32
// values of a (possibly bf16) parameter tensor.
#pragma once

#include <cstdint>

#include "device_layer.h"

namespace shardplan::gpu {

// `count` floats in an activations-category buffer, allocated on (and released after) context.stream. Every buffer
// a device layer touches comes from here — its output, what it keeps, and its temporary scratch — so the pool's
// tracker sees the layer's memory as the CPU runner sees SavedActivations and temporaries. The contents are
// uninitialised.
DeviceBuffer float_buffer(const DeviceContext& context, std::int64_t count);
// The same, for `count` elements of `dtype`.
DeviceBuffer typed_buffer(const DeviceContext& context, DeviceDType dtype, std::int64_t count);

// Hidden states [micro_batch·seq_len × width] in a fresh (uninitialised) activations buffer.
DeviceActivations make_activations(const DeviceContext& context, int micro_batch, int seq_len, std::int64_t width);

// `count` floats from `from` to `to`, enqueued on context.stream.
void copy_floats(const DeviceContext& context, const float* from, float* to, std::int64_t count);
// A copy of `from` (same shape) in a fresh buffer.
DeviceActivations copy_activations(const DeviceContext& context, const DeviceActivations& from);

// The fp32 values of a parameter tensor the fp32 kernels read (a norm weight, a bias): the tensor's own data when it
// is f32; otherwise an exact bf16 → fp32 copy (bf16 is the top half of an fp32) made into `scratch`, which must
// outlive the work that reads it (dropping it after enqueueing that work is enough: it is stream-ordered).
const float* fp32_values(const DeviceContext& context, const DeviceTensor& tensor, DeviceBuffer& scratch);

}  // namespace shardplan::gpu
