// Import of Hugging Face vision-encoder configs (ViT, CLIP and SigLIP vision towers) as ModelSpecs of non-causal
// blocks over image patches, and the same towers as a multimodal model embeds them (hf_arch_llava.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_input.h"
#include "model_spec.h"

namespace shardplan {

// True for the configs this file reads: "architectures"[0] (or "model_type") is ViTModel / ViTForImageClassification
// (vit), CLIPVisionModel (clip_vision_model) or SiglipVisionModel (siglip_vision_model).
bool is_hf_vision_config(const nlohmann::json& document);

// The model, its layers named as transformers names the modules (transformers 4.45: modeling_vit.py,
// modeling_clip.py, modeling_siglip.py). Its sequence is the tokens of one image (patches, plus the class token
// where the model has one): --seq-len is tokens per image, --micro-batch images. `origin` names the file in errors.
ModelSpec vision_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                      const std::string& origin);

// A CLIPVisionModel or SiglipVisionModel as its layers, named under `prefix` ("vision_tower.vision_model."), in the
// parts a host model places apart: the stem (patch embedding, CLIP's pre_layrnorm), the encoder blocks, the tail
// (post_layernorm, SigLIP's attention-pooling head). Per image: patches, and the tokens the blocks run on (the patches
// and CLIP's class token).
struct VisionTower {
  std::vector<LayerSpec> stem, blocks, tail;
  std::int64_t hidden_size = 0;
  std::int64_t num_heads = 0;
  std::int64_t patches = 0;
  std::int64_t tokens_per_image = 0;
};

// `config` is a vision_config object whose model_type is clip_vision_model (the default, as LlavaConfig reads one
// without it) or siglip_vision_model; another is an InputError naming the field.
VisionTower vision_tower_from_hf_config(const JsonObjectReader& config, const std::string& prefix);

}  // namespace shardplan
