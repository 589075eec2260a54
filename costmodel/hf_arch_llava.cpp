// Hugging Face LLaVA configs → ModelSpec: vision_config (CLIP or SigLIP vision tower), the two-layer projector and
// text_config (a Llama, Mistral or Qwen2 decoder) in the order LlavaForConditionalGeneration.forward runs them.
#include "hf_arch_llava.h"

#include <string_view>

#include "block_kernels.h"
#include "decoder_builder.h"
#include "hf_arch_vision.h"
#include "hf_config.h"
#include "input_limits.h"
#include "json_input.h"
#include "vision_splice.h"

namespace shardplan {
namespace {

// A text model's own defaults for the keys a LLaVA text_config may leave out: llava-hf/llava-1.5-7b-hf's carries only
// vocab_size, max_position_embeddings and rms_norm_eps beside model_type, the rest is LlamaConfig's. The __init__
// defaults of LlamaConfig, MistralConfig and Qwen2Config in transformers 4.45 (kv_heads 0: None, i.e. the heads).
struct TextModel {
  std::string_view model_type, class_name;
  std::int64_t vocab, hidden, intermediate, layers, heads, kv_heads, positions;
};
constexpr TextModel kTextModels[] = {
    {"llama", "LlamaForCausalLM", 32000, 4096, 11008, 32, 32, 0, 2048},
    {"mistral", "MistralForCausalLM", 32000, 4096, 14336, 32, 32, 8, 4096 * 32},
    {"qwen2", "Qwen2ForCausalLM", 151936, 4096, 22016, 32, 32, 32, 32768},
};

// text_config with its class's defaults filled in and "architectures" naming the causal-LM class, for the decoder
// import (hf_config.h). LlavaConfig reads a text_config without model_type as a llama one (configuration_llava.py).
nlohmann::json filled_text_config(const JsonObjectReader& text) {
  const std::string model_type = text.optional_string("model_type").value_or("llama");
  for (const TextModel& known : kTextModels) {
    if (known.model_type != model_type) continue;
    nlohmann::json filled = text.raw();
    filled["architectures"] = {std::string(known.class_name)};
    filled["model_type"] = model_type;
    const auto fill = [&](const char* key, std::int64_t value) {
      if (!filled.contains(key) && value > 0) filled[key] = value;
    };
    fill("vocab_size", known.vocab);
    fill("hidden_size", known.hidden);
    fill("intermediate_size", known.intermediate);
    fill("num_hidden_layers", known.layers);
    fill("num_attention_heads", known.heads);
    fill("num_key_value_heads", known.kv_heads);
    fill("max_position_embeddings", known.positions);
    return filled;
  }
  text.fail("model_type", "llama, mistral or qwen2 (the language models supported under LLaVA), got '" + model_type +
                              "'");
}

// Note [LLaVA layout]: LlavaForConditionalGeneration.forward (transformers 4.45, modeling_llava.py) embeds the text
// first (get_input_embeddings()(input_ids)), then runs the whole vision tower (vision_tower(pixel_values,
// output_hidden_states=True)), takes hidden_states[vision_feature_layer], drops the class token under the "default"
// strategy, projects it (multi_modal_projector) and scatters the result over the image tokens of the sequence, which
// the language model then runs on. So the layers, in forward order:
//   language_model.model.embed_tokens, vision_tower.vision_model.{embeddings, pre_layrnorm},
//   vision_tower.vision_model.encoder.layers.0..L-1, multi_modal_projector, language_model.model.layers.0..N-1,
//   language_model.model.norm, language_model.lm_head.
// The vision tower's post_layernorm (CLIPVisionTransformer runs it on the pooled class token) has an output no one
// reads: no FLOPs counted, nothing kept, no backward. It is listed among the root's layers before the blocks, so the
// blocks stay one run (the wrap search's requirement, planner/fragment_cache.cpp); its 2·h parameters are what it adds.
// The projector sits between the towers; FSDP may wrap it like any module, so it is a wrap candidate (a block) rather
// than a root layer in the middle of the blocks, which the wrap search cannot place. Simplification: the encoder
// layers past vision_feature_layer (the last one at -2) also have unread outputs and run no backward in reality; they
// are counted as trained blocks (one of 24 vision layers, under 2% of one decoder layer's work at 2048 tokens).

// LlavaMultiModalProjector: linear_1 (vision hidden × feature layers → text hidden), the activation, linear_2 (text
// hidden → text hidden), with biases (multimodal_projector_bias, true unless the config says otherwise). It keeps, per
// image token, its input, linear_1's output (the activation's input) and the activation's output (linear_2's input).
LayerSpec projector(std::int64_t in, std::int64_t out, bool bias, std::int64_t image_tokens) {
  LayerSpec layer;
  layer.name = "multi_modal_projector";
  layer.kind = LayerKind::transformer_block;  // a wrap candidate: Note [LLaVA layout]
  layer.tensors = {{"linear_1.weight", {out, in}}, {"linear_2.weight", {out, out}}};
  if (bias) {
    layer.tensors.push_back({"linear_1.bias", {out}});
    layer.tensors.push_back({"linear_2.bias", {out}});
  }
  const double in_d = static_cast<double>(in), out_d = static_cast<double>(out);
  layer.flops.matmul_flops_per_token = 2.0 * (in_d * out_d + out_d * out_d);
  layer.flops.causal_attention = false;  // no attention
  layer.activations.elements_per_token = in_d + 2.0 * out_d;
  layer.activations.checkpoint_elements_per_token = in_d;  // full recompute keeps the input
  LayerKernelSpec kernels;
  kernels.projections = {{"linear_1", in, out, true}, {"linear_2", out, out, false}};
  // GELU as the encoder blocks count it (hf_arch_vision.cpp): read and write f forward, 3f backward; backward reduces
  // the output gradient once per bias.
  ElementwiseSpec gelu;
  gelu.name = "projector act";
  gelu.forward = {2.0 * out_d, 0.0, 0.0, 1};
  gelu.backward = {3.0 * out_d, 0.0, 0.0, 2};
  kernels.elementwise.push_back(gelu);
  if (bias) {
    ElementwiseSpec bias_grads;
    bias_grads.name = "bias gradients";
    bias_grads.backward = {2.0 * out_d, 0.0, 0.0, 2};
    kernels.elementwise.push_back(bias_grads);
  }
  layer.kernels = kernels;
  layer.activations.selective_op_elements_per_token = selective_op_kept_elements(kernels, in);
  layer.fixed_tokens_per_sample = image_tokens;
  return layer;
}

// How many hidden_states the projector concatenates: vision_feature_layer is one index, or (newer configs) a list.
// Each index must name an entry of hidden_states (the embeddings' output and one per layer: L + 1 of them).
std::int64_t feature_layer_count(const JsonObjectReader& config, std::int64_t vision_layers) {
  if (!config.has("vision_feature_layer")) return 1;  // LlavaConfig's default, -2
  const nlohmann::json& value = config.raw().at("vision_feature_layer");
  const std::vector<nlohmann::json> indices = value.is_array() ? config.array("vision_feature_layer")
                                                               : std::vector<nlohmann::json>{value};
  if (static_cast<std::int64_t>(indices.size()) > vision_layers + 1) {
    config.fail("vision_feature_layer",
                "at most one index per hidden state (" + std::to_string(vision_layers + 1) + ")");
  }
  for (const nlohmann::json& index : indices) {
    if (!JsonObjectReader::integer_in(index, -(vision_layers + 1), vision_layers)) {
      config.fail("vision_feature_layer", "an index of the vision tower's hidden states, from " +
                                              std::to_string(-(vision_layers + 1)) + " to " +
                                              std::to_string(vision_layers) + " (or a list of them)");
    }
  }
  return static_cast<std::int64_t>(indices.size());
}

}  // namespace

bool is_hf_llava_config(const nlohmann::json& document) {
  if (!document.is_object()) return false;
  const auto architectures = document.find("architectures");
  if (architectures != document.end() && architectures->is_array() && !architectures->empty() &&
      architectures->front().is_string()) {
    return architectures->front() == "LlavaForConditionalGeneration";
  }
  const auto model_type = document.find("model_type");
  return model_type != document.end() && model_type->is_string() && *model_type == "llava";
}

ModelSpec llava_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                     const std::string& origin) {
  const JsonObjectReader config(document, origin);
  VisionTower tower = vision_tower_from_hf_config(config.object("vision_config"), "vision_tower.vision_model.");
  const JsonObjectReader text = config.object("text_config");
  ModelSpec decoder =
      build_decoder(name, architecture_from_hf_config(filled_text_config(text), origin + " (text_config)"), origin);

  // Per sample one image (Note [Tokens per sample]): its tokens in the tower, and the features the projector maps —
  // all but the first under "default" (selected_image_feature[:, 1:]: CLIP's class token; SigLIP, which has none,
  // loses a patch), every token under "full".
  const std::string strategy = config.optional_string("vision_feature_select_strategy").value_or("default");
  if (strategy != "default" && strategy != "full") config.fail("vision_feature_select_strategy", "default or full");
  const std::int64_t image_tokens = tower.tokens_per_image - (strategy == "default" ? 1 : 0);
  if (const auto stated = config.optional_int_in_range("image_seq_length", 1, limits::kMaxSeqLen);
      stated && *stated != image_tokens) {
    config.fail("image_seq_length", std::to_string(image_tokens) + ", the image's " + strategy +
                                        "-strategy features of the vision tower");
  }
  if (config.has("projector_hidden_act")) config.string("projector_hidden_act");  // GELU's traffic whichever it is
  const std::int64_t features = feature_layer_count(config, static_cast<std::int64_t>(tower.blocks.size()));
  const bool bias = config.boolean("multimodal_projector_bias", true);

  for (auto* part : {&tower.stem, &tower.blocks, &tower.tail}) {
    for (LayerSpec& layer : *part) layer.fixed_tokens_per_sample = tower.tokens_per_image;
  }
  for (LayerSpec& layer : tower.tail) {  // Note [LLaVA layout]: outputs no one reads
    layer.flops = LayerFlops{};
    layer.activations = ActivationFootprint{};
    layer.kernels.reset();
  }

  std::vector<LayerSpec> vision;
  for (auto* part : {&tower.stem, &tower.tail, &tower.blocks}) {
    for (LayerSpec& layer : *part) vision.push_back(std::move(layer));
  }
  vision.push_back(projector(tower.hidden_size * features, decoder.hidden_size, bias, image_tokens));
  return splice_vision_after_embedding(std::move(decoder), std::move(vision), "language_model.", origin);
}

}  // namespace shardplan
