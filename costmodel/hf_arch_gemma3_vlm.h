// Import of Hugging Face Gemma 3 multimodal configs (Gemma3ForConditionalGeneration): the SigLIP vision tower, the
// pooling projector and the Gemma 3 language model as one ModelSpec, as hf_arch_llava.h lays out LLaVA's.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

// True when "architectures"[0] is Gemma3ForConditionalGeneration, or, without "architectures", model_type is "gemma3".
bool is_hf_gemma3_vlm_config(const nlohmann::json& document);

// The model, its layers named as the released checkpoints name them (vision_tower.vision_model.*,
// multi_modal_projector, language_model.model.*, language_model.lm_head tied to the embedding). The vision layers run
// on one image's patches per sample, the projector on its mm_tokens_per_image tokens (Note [Tokens per sample] in
// model_spec.h), the decoder on --seq-len. `origin` names the file in errors.
ModelSpec gemma3_vlm_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                          const std::string& origin);

}  // namespace shardplan
