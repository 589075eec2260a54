// Import of Hugging Face vision-encoder configs (ViT, CLIP and SigLIP vision towers) as ModelSpecs of non-causal
// blocks over image patches; LLaVA-style multimodal configs are recognised and refused for now.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"

namespace shardplan {

// True for the configs this file reads: "architectures"[0] (or "model_type") is ViTModel / ViTForImageClassification
// (vit), CLIPVisionModel (clip_vision_model), SiglipVisionModel (siglip_vision_model), or
// LlavaForConditionalGeneration (llava).
bool is_hf_vision_config(const nlohmann::json& document);

// The model, its layers named as transformers names the modules (transformers 4.45: modeling_vit.py,
// modeling_clip.py, modeling_siglip.py). Its sequence is the tokens of one image (patches, plus the class token
// where the model has one): --seq-len is tokens per image, --micro-batch images. `origin` names the file in errors.
ModelSpec vision_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                      const std::string& origin);

}  // namespace shardplan
