// Import of Hugging Face LLaVA configs (LlavaForConditionalGeneration): a vision tower, the multimodal projector and a
// decoder-only language model as one ModelSpec whose wrap candidates come from both towers.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

// True when "architectures"[0] is LlavaForConditionalGeneration, or, without "architectures", model_type is "llava".
bool is_hf_llava_config(const nlohmann::json& document);

// The model, its layers named as transformers 4.45 names LlavaForConditionalGeneration's modules
// (vision_tower.vision_model.encoder.layers.N, multi_modal_projector, language_model.model.layers.N,
// language_model.lm_head). The vision layers run on one image's tokens per sample (Note [Tokens per sample] in
// model_spec.h), the decoder on --seq-len, which includes the image's tokens. `origin` names the file in errors.
ModelSpec llava_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                     const std::string& origin);

}  // namespace shardplan
