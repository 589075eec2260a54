// The GPT-NeoX decoder block (EleutherAI's gpt-neox-20b and Pythia): tensors, FLOPs, activations, kernels.
#pragma once

#include <cstdint>

#include "model_spec.h"

namespace shardplan {

// transformers' GPTNeoXLayer for block `index`, named gpt_neox.layers.N.
LayerSpec gpt_neox_block(const DecoderArchitecture& arch, std::int64_t index);

}  // namespace shardplan
