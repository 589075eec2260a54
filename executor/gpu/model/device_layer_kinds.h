// The per-kind device layer factories (one file each), for make_device_layer.
#pragma once

#include <memory>

#include "device_layer.h"
#include "layer_kernel.h"

namespace shardplan::gpu {

std::unique_ptr<DeviceLayer> make_device_embedding_layer(const runtime::DecoderDims& dims);
std::unique_ptr<DeviceLayer> make_device_decoder_block(const runtime::DecoderDims& dims);
std::unique_ptr<DeviceLayer> make_device_rmsnorm_layer(const runtime::DecoderDims& dims);
std::unique_ptr<DeviceLayer> make_device_lm_head_loss(const runtime::DecoderDims& dims);

}  // namespace shardplan::gpu
