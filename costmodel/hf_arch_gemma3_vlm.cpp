// Hugging Face Gemma 3 multimodal configs → ModelSpec: vision_config (SigLIP), Gemma3MultiModalProjector and
// text_config (Gemma 3 text) in the order Gemma3ForConditionalGeneration.forward runs them.
#include "hf_arch_gemma3_vlm.h"

#include <cmath>

#include "block_kernels.h"
#include "decoder_builder.h"
#include "hf_arch_vision.h"
#include "hf_config.h"
#include "input_limits.h"
#include "json_input.h"
#include "vision_splice.h"

namespace shardplan {
namespace {

// Gemma3TextConfig's __init__ defaults (transformers/models/gemma3/configuration_gemma3.py) for the keys the released
// text_configs leave out: google/gemma-3-4b-it's names only hidden_size, intermediate_size, num_hidden_layers,
// rope_scaling and sliding_window; its 8 heads of 256 over 4 kv heads and its 262,208-token vocabulary are the
// class's defaults.
nlohmann::json filled_text_config(const JsonObjectReader& text) {
  const std::string model_type = text.optional_string("model_type").value_or("gemma3_text");
  if (model_type != "gemma3_text") text.fail("model_type", "gemma3_text, got '" + model_type + "'");
  nlohmann::json filled = text.raw();
  filled["architectures"] = {"Gemma3ForCausalLM"};
  filled["model_type"] = model_type;
  const auto fill = [&](const char* key, std::int64_t value) {
    if (!filled.contains(key)) filled[key] = value;
  };
  fill("vocab_size", 262'208);
  fill("hidden_size", 2304);
  fill("intermediate_size", 9216);
  fill("num_hidden_layers", 26);
  fill("num_attention_heads", 8);
  fill("num_key_value_heads", 4);
  fill("head_dim", 256);
  fill("max_position_embeddings", 131'072);
  return filled;
}

// Gemma3MultiModalProjector (modeling_gemma3.py): the tower's patches (image_size / patch_size per side) reshaped to
// a grid, avg_pool2d with kernel patches_per_side / tokens_per_side down to mm_tokens_per_image tokens,
// mm_soft_emb_norm (Gemma3RMSNorm over the vision width), then a matmul with mm_input_projection_weight [vision hidden,
// text hidden] (a bare Parameter, no bias). Per output token: the pool reads kernel² patches and writes one; the norm
// is an RMSNorm; the matmul keeps its input (and the norm its own).
LayerSpec projector(std::int64_t vision_hidden, std::int64_t text_hidden, std::int64_t pooled_patches,
                    std::int64_t tokens) {
  LayerSpec layer;
  layer.name = "multi_modal_projector";
  layer.kind = LayerKind::transformer_block;  // a wrap candidate between the towers (Note [LLaVA layout])
  layer.tensors = {{"mm_input_projection_weight", {vision_hidden, text_hidden}},
                   {"mm_soft_emb_norm.weight", {vision_hidden}}};
  const double v = static_cast<double>(vision_hidden), t = static_cast<double>(text_hidden);
  layer.flops.matmul_flops_per_token = 2.0 * v * t;
  layer.flops.causal_attention = false;  // no attention
  layer.activations.elements_per_token = 2.0 * v;  // the norm's input and the matmul's input
  layer.activations.checkpoint_elements_per_token = v;
  LayerKernelSpec kernels;
  kernels.projections = {{"mm_input_projection", vision_hidden, text_hidden, true}};
  kernels.elementwise.push_back(
      elementwise_kernel("avg_pool2d", (static_cast<double>(pooled_patches) + 1.0) * v, 0.0, 1));
  ElementwiseSpec norm = elementwise_kernel("mm_soft_emb_norm", 4.0 * v, 7.0 * v, 8);  // as LlamaRMSNorm runs
  kernels.elementwise.push_back(norm);
  layer.kernels = kernels;
  layer.activations.selective_op_elements_per_token = selective_op_kept_elements(kernels, vision_hidden);
  layer.fixed_tokens_per_sample = tokens;
  return layer;
}

}  // namespace

bool is_hf_gemma3_vlm_config(const nlohmann::json& document) {
  if (!document.is_object()) return false;
  const auto architectures = document.find("architectures");
  if (architectures != document.end() && architectures->is_array() && !architectures->empty() &&
      architectures->front().is_string()) {
    return architectures->front() == "Gemma3ForConditionalGeneration";
  }
  const auto model_type = document.find("model_type");
  return model_type != document.end() && model_type->is_string() && *model_type == "gemma3";
}

// Note [Gemma 3 layout]: Gemma3ForConditionalGeneration.forward embeds the text, runs the whole SigLIP tower on the
// image (vision_use_head false: no attention-pooling head; post_layernorm on every patch, which the projector reads),
// pools and projects it to mm_tokens_per_image (256) soft tokens and scatters them over the image tokens of the
// sequence. The layers as hf_arch_llava.cpp's Note [LLaVA layout] orders them: the embedding, the tower's root
// layers (its embeddings, and post_layernorm placed before the blocks so the blocks, the projector and the decoder's
// blocks stay one run for the wrap search; its work is counted, as it runs), the encoder blocks, the projector, the
// decoder. One image per sample.
ModelSpec gemma3_vlm_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                          const std::string& origin) {
  const JsonObjectReader config(document, origin);
  const JsonObjectReader vision_config = config.object("vision_config");
  const std::string vision_type = vision_config.optional_string("model_type").value_or("siglip_vision_model");
  if (vision_type != "siglip_vision_model") {
    vision_config.fail("model_type", "siglip_vision_model (Gemma 3's vision tower), got '" + vision_type + "'");
  }
  if (vision_config.boolean("vision_use_head", false)) {
    vision_config.fail("vision_use_head", "false (Gemma3ForConditionalGeneration reads every patch, not the head)");
  }
  nlohmann::json siglip = vision_config.raw();
  siglip["model_type"] = "siglip_vision_model";
  siglip["vision_use_head"] = false;
  VisionTower tower =
      vision_tower_from_hf_config(JsonObjectReader(siglip, origin, "vision_config"), "vision_tower.vision_model.");
  ModelSpec decoder = build_decoder(
      name, architecture_from_hf_config(filled_text_config(config.object("text_config")), origin + " (text_config)"),
      origin);

  // mm_tokens_per_image (default 256) must be a square whose side divides the patches' side.
  const std::int64_t tokens = config.optional_int_in_range("mm_tokens_per_image", 1, limits::kMaxSeqLen).value_or(256);
  const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(tower.patches))));
  const auto token_side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(tokens))));
  if (token_side * token_side != tokens || side * side != tower.patches || side % token_side != 0) {
    config.fail("mm_tokens_per_image", "a square whose side divides the image's " + std::to_string(side) +
                                           " patches per side");
  }
  const std::int64_t kernel = side / token_side;

  for (auto* part : {&tower.stem, &tower.blocks, &tower.tail}) {
    for (LayerSpec& layer : *part) layer.fixed_tokens_per_sample = tower.tokens_per_image;
  }
  std::vector<LayerSpec> vision;
  for (auto* part : {&tower.stem, &tower.tail, &tower.blocks}) {
    for (LayerSpec& layer : *part) vision.push_back(std::move(layer));
  }
  vision.push_back(projector(tower.hidden_size, decoder.hidden_size, kernel * kernel, tokens));
  return splice_vision_after_embedding(std::move(decoder), std::move(vision), "language_model.", origin);
}

}  // namespace shardplan
