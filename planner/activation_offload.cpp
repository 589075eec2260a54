// Activation offloading (Note [Activation offloading] in activation_offload.h): the layers and bytes it moves.
#include "activation_offload.h"

#include "unit_layout.h"

namespace shardplan {

std::int64_t offloaded_activation_bytes(const Plan& plan, const ModelSpec& model, std::size_t layer) {
  // torchtune's NoOpManager around the output head: its saved tensors stay on the device.
  if (!plan.training.activation_offload || model.layers[layer].kind == LayerKind::lm_head) return 0;
  return kept_activation_bytes(model, plan.training, layer, layer_checkpointing_of(plan, model, layer));
}

std::int64_t host_activation_bytes(const Plan& plan, const ModelSpec& model) {
  std::int64_t bytes = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    bytes += offloaded_activation_bytes(plan, model, layer);
  }
  return bytes;
}

}  // namespace shardplan
