// Import of Hugging Face Qwen2-VL and Qwen2.5-VL configs (Qwen2VLForConditionalGeneration,
// Qwen2_5_VLForConditionalGeneration): the vision transformer, its patch merger and the Qwen2 language model as one
// ModelSpec, laid out as hf_arch_llava.h lays out LLaVA's.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

// True when "architectures"[0] is Qwen2VLForConditionalGeneration or Qwen2_5_VLForConditionalGeneration, or, without
// "architectures", model_type is "qwen2_vl" or "qwen2_5_vl".
bool is_hf_qwen2_vl_config(const nlohmann::json& document);

// Note [Qwen2-VL image]: the vision tower's work depends on each image's resolution (dynamic resolution: the
// processor resizes within min_pixels..max_pixels, which preprocessor_config.json holds, not config.json). shardplan
// plans one square image per sample of this side in pixels: 448 = 16 merged tokens of 28 px per side, 256 visual
// tokens — the low end of the 256..1280 tokens per image the Qwen2-VL and Qwen2.5-VL model cards suggest
// (min_pixels = 256·28·28, max_pixels = 1280·28·28).
inline constexpr std::int64_t kQwen2VlImageSidePixels = 448;

// The model, its layers named as the released checkpoints name their tensors (model.embed_tokens, visual.patch_embed,
// visual.blocks.N, visual.merger, model.layers.N, model.norm, lm_head). The vision layers run on one image's patches
// per sample, the merger on its merged tokens (Note [Tokens per sample] in model_spec.h), the decoder on --seq-len.
// `origin` names the file in errors.
ModelSpec qwen2_vl_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                        const std::string& origin);

}  // namespace shardplan
