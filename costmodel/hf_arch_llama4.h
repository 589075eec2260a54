// Import of Hugging Face Llama 4 configs (Llama4ForConditionalGeneration: Llama-4-Scout-17B-16E,
// Llama-4-Maverick-17B-128E; Llama4ForCausalLM, the text model alone): the MoE decoder with its shared expert and,
// for the multimodal class, the vision encoder, its pixel-shuffle adapter and the projector.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

// True when "architectures"[0] is Llama4ForConditionalGeneration or Llama4ForCausalLM, or, without "architectures",
// model_type is "llama4" or "llama4_text".
bool is_hf_llama4_config(const nlohmann::json& document);

// The model, its layers named as the released checkpoints name their tensors (language_model.model.layers.N.
// feed_forward.experts.gate_up_proj, vision_model.model.layers.N, multi_modal_projector; the text class without the
// language_model. prefix). The vision layers run on one image tile per sample (Note [Llama 4 image]), the decoder on
// --seq-len. `origin` names the file in errors.
ModelSpec llama4_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                      const std::string& origin);

}  // namespace shardplan
