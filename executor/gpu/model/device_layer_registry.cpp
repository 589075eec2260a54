// make_device_layer: the device layer for a LayerSpec's kind, after the CPU runtime's own model and tensor checks.
#include "device_layer_kinds.h"
#include "errors.h"

namespace shardplan::gpu {

std::unique_ptr<DeviceLayer> make_device_layer(const ModelSpec& model, std::size_t index) {
  const runtime::DecoderDims dims = runtime::decoder_dims(model);
  // The device layers read exactly the tensors the CPU kernels read, so the checks are runtime::make_layer_kernel's
  // (index range, tying, names and shapes of the owner's tensors, kind 'other' refused), run by building — and
  // dropping — the CPU kernel rather than restating them here.
  (void)runtime::make_layer_kernel(model, index);
  switch (model.layers[index].kind) {
    case LayerKind::embedding: return make_device_embedding_layer(dims);
    case LayerKind::transformer_block: return make_device_decoder_block(dims);
    case LayerKind::norm: return make_device_rmsnorm_layer(dims);
    case LayerKind::lm_head: return make_device_lm_head_loss(dims);
    case LayerKind::other: break;
  }
  throw InputError("model '" + model.name + "', layer '" + model.layers[index].name +
                   "': kind 'other' has no GPU layer; expected embedding, transformer_block, norm or lm_head");
}

}  // namespace shardplan::gpu
