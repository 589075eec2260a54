// The Multi-head Latent Attention of a DeepSeek-V2/V3 decoder block: tensors, FLOPs, activations, kernels.
#pragma once

#include "model_spec.h"

namespace shardplan {

// Replaces the q/k/v/o attention of llama block `block` with the architecture's MLA (arch.mla must be set), named
// as transformers' DeepseekV2Attention names it; FLOPs and kept activations follow its real shapes.
void replace_attention_with_mla(const DecoderArchitecture& arch, LayerSpec& block);

}  // namespace shardplan
