// The mixture-of-experts MLP of a decoder block (Mixtral, Qwen2-MoE, Qwen3-MoE): tensors, FLOPs, activations, kernels.
#pragma once

#include <cstdint>
#include <string>

#include "model_spec.h"

namespace shardplan {

// Checks the MoE hyper-parameters (positive sizes, top-k within the experts, the parameter count within 64 bits).
// InputError naming `origin` and the field.
void check_moe_architecture(const DecoderArchitecture& arch, const std::string& origin);

// Replaces the dense SwiGLU MLP of llama block `block` (built by the decoder builder for layer `index`) with the
// architecture's MoE MLP: the router, every routed expert, the shared expert where there is one, named as the
// reference implementation names them; FLOPs and activations of top-k experts per token (Note [Capacity factor]).
void replace_mlp_with_moe(const DecoderArchitecture& arch, LayerSpec& block);

}  // namespace shardplan
