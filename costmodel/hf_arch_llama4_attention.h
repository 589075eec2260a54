// Llama 4's attention pattern from its text config: which layers rotate (RoPE or NoPE), each layer's attention chunk,
// and the kernels each kind of layer adds or drops (Note [Llama 4 attention kernels]).
#pragma once

#include <cstdint>
#include <vector>

#include "json_input.h"
#include "model_spec.h"

namespace shardplan {

std::vector<bool> rope_layers(const JsonObjectReader& text, std::int64_t layers);
std::vector<std::int64_t> chunk_sizes(const JsonObjectReader& text, std::int64_t layers);
void llama4_attention_kernels(LayerKernelSpec& kernels, const DecoderArchitecture& arch, bool rope, bool qk_l2_norm,
                              bool temperature);
bool temperature_tuning(const JsonObjectReader& text);

}  // namespace shardplan
