// The search tests' small models: llama2-7b's block shape with a chosen number of blocks.
#pragma once

#include <cstdint>
#include <string>

#include "decoder_builder.h"
#include "model_presets.h"

namespace shardplan::testing {

inline ModelSpec llama_blocks(std::int64_t blocks) {
  DecoderArchitecture arch = preset_model("llama2-7b").architecture.value();
  arch.num_layers = blocks;
  return build_decoder("llama2-7b-" + std::to_string(blocks), arch, "test");
}

}  // namespace shardplan::testing
