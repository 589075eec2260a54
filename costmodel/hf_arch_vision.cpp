// Hugging Face ViT, CLIP-vision and SigLIP-vision configs → ModelSpec (and the vision tower LLaVA embeds): patch
// embedding, non-causal encoder blocks (LayerNorm, multi-head attention with biases, GELU MLP), final LayerNorm, head.
#include "hf_arch_vision.h"

#include <optional>
#include <string_view>

#include "block_kernels.h"
#include "errors.h"
#include "input_limits.h"
#include "json_input.h"

namespace shardplan {
namespace {

enum class VisionKind { vit, vit_classifier, clip, siglip };

struct KnownVision {
  std::string_view class_name;
  std::string_view model_type;
  VisionKind kind;
};

constexpr KnownVision kKnown[] = {
    {"ViTModel", "vit", VisionKind::vit},
    {"ViTForImageClassification", "", VisionKind::vit_classifier},
    {"CLIPVisionModel", "clip_vision_model", VisionKind::clip},
    {"SiglipVisionModel", "siglip_vision_model", VisionKind::siglip},
};

std::optional<VisionKind> detect(const nlohmann::json& document) {
  if (!document.is_object()) return std::nullopt;
  const auto architectures = document.find("architectures");
  if (architectures != document.end() && architectures->is_array() && !architectures->empty() &&
      architectures->front().is_string()) {
    for (const auto& known : kKnown) {
      if (known.class_name == architectures->front().get<std::string>()) return known.kind;
    }
    return std::nullopt;
  }
  const auto model_type = document.find("model_type");
  if (model_type == document.end() || !model_type->is_string()) return std::nullopt;
  for (const auto& known : kKnown) {
    if (!known.model_type.empty() && known.model_type == model_type->get<std::string>()) return known.kind;
  }
  return std::nullopt;
}

// The encoder's hyper-parameters, with each family's config defaults (ViTConfig, CLIPVisionConfig, SiglipVisionConfig
// in transformers 4.45).
struct VisionShape {
  std::int64_t hidden = 768, intermediate = 3072, layers = 12, heads = 12, channels = 3, image = 224, patch = 16;
  bool qkv_bias = true;
  std::int64_t patches() const { return (image / patch) * (image / patch); }
};

VisionShape read_shape(const JsonObjectReader& config, VisionKind kind) {
  VisionShape shape;
  if (kind == VisionKind::clip) shape.patch = 32;  // CLIPVisionConfig's default patch_size
  const auto size = [&](std::string_view key, std::int64_t fallback, std::int64_t most) {
    return config.optional_int_in_range(key, 1, most).value_or(fallback);
  };
  shape.hidden = size("hidden_size", shape.hidden, limits::kMaxHiddenSize);
  shape.intermediate = size("intermediate_size", shape.intermediate, limits::kMaxIntermediateSize);
  shape.layers = size("num_hidden_layers", shape.layers, limits::kMaxLayers);
  shape.heads = size("num_attention_heads", shape.heads, limits::kMaxHeads);
  shape.channels = size("num_channels", shape.channels, 64);
  shape.image = size("image_size", shape.image, 1 << 16);
  shape.patch = size("patch_size", shape.patch, 1 << 16);
  if (kind == VisionKind::vit || kind == VisionKind::vit_classifier) shape.qkv_bias = config.boolean("qkv_bias", true);
  if (shape.hidden % shape.heads != 0) config.fail("num_attention_heads", "a divisor of hidden_size");
  if (shape.patch > shape.image) config.fail("patch_size", "at most image_size");
  return shape;
}

void add_linear(std::vector<TensorSpec>& tensors, const std::string& prefix, std::int64_t out, std::int64_t in,
                bool bias) {
  tensors.push_back({prefix + ".weight", {out, in}});
  if (bias) tensors.push_back({prefix + ".bias", {out}});
}

void add_layer_norm(std::vector<TensorSpec>& tensors, const std::string& prefix, std::int64_t hidden) {
  tensors.push_back({prefix + ".weight", {hidden}});
  tensors.push_back({prefix + ".bias", {hidden}});
}

// The kernels of a pre-norm encoder block in eager PyTorch, counted as block_kernels.cpp counts GPT-2's (Note
// [Elementwise traffic] there): LayerNorm (one fused kernel: read h, write h; backward two kernels, 5h), q, k, v and
// out projections, attention without a causal mask, residual add (3h), LayerNorm, fc1, GELU (f, f; backward 3f),
// fc2, residual add; backward reduces the output gradient once per bias (3h + h + f + h).
LayerKernelSpec encoder_block_kernels(const VisionShape& shape) {
  const std::int64_t h = shape.hidden, f = shape.intermediate;
  const double hd = static_cast<double>(h), fd = static_cast<double>(f);
  LayerKernelSpec spec;
  spec.projections = {{"q_proj", h, h, true},  {"k_proj", h, h, false}, {"v_proj", h, h, true},
                      {"out_proj", h, h, false}, {"fc1", h, f, true},   {"fc2", f, h, false}};
  spec.attention = AttentionSpec{shape.heads, h / shape.heads, false};
  const auto traffic = [](std::string name, double forward, double backward, int kernels) {
    ElementwiseSpec op;
    op.name = std::move(name);
    op.forward = {forward, 0.0, 0.0, kernels};
    op.backward = {backward, 0.0, 0.0, 2 * kernels};
    return op;
  };
  spec.elementwise.push_back(traffic("layernorm", 2.0 * hd, 5.0 * hd, 1));
  spec.elementwise.push_back(traffic("residual add", 3.0 * hd, 3.0 * hd, 1));
  spec.elementwise.push_back(traffic("layernorm", 2.0 * hd, 5.0 * hd, 1));
  spec.elementwise.push_back(traffic("gelu", 2.0 * fd, 3.0 * fd, 1));
  ElementwiseSpec last_add = traffic("residual add", 3.0 * hd, 3.0 * hd, 1);
  last_add.recomputed_by_op_policy = false;
  spec.elementwise.push_back(last_add);
  ElementwiseSpec bias_grads;
  bias_grads.name = "bias gradients";
  bias_grads.backward = {5.0 * hd + fd, 0.0, 0.0, 4};
  spec.elementwise.push_back(bias_grads);
  return spec;
}

LayerSpec encoder_block(const VisionShape& shape, VisionKind kind, const std::string& name) {
  const std::int64_t h = shape.hidden, f = shape.intermediate;
  LayerSpec layer;
  layer.name = name;
  layer.kind = LayerKind::transformer_block;
  auto& t = layer.tensors;
  if (kind == VisionKind::vit || kind == VisionKind::vit_classifier) {
    // ViTLayer: attention.attention.{query,key,value}, attention.output.dense, intermediate.dense, output.dense,
    // layernorm_before, layernorm_after.
    add_linear(t, "attention.attention.query", h, h, shape.qkv_bias);
    add_linear(t, "attention.attention.key", h, h, shape.qkv_bias);
    add_linear(t, "attention.attention.value", h, h, shape.qkv_bias);
    add_linear(t, "attention.output.dense", h, h, true);
    add_linear(t, "intermediate.dense", f, h, true);
    add_linear(t, "output.dense", h, f, true);
    add_layer_norm(t, "layernorm_before", h);
    add_layer_norm(t, "layernorm_after", h);
  } else {
    // CLIPEncoderLayer / SiglipEncoderLayer: self_attn.{k,v,q,out}_proj, layer_norm1, mlp.fc1, mlp.fc2, layer_norm2.
    add_linear(t, "self_attn.k_proj", h, h, true);
    add_linear(t, "self_attn.v_proj", h, h, true);
    add_linear(t, "self_attn.q_proj", h, h, true);
    add_linear(t, "self_attn.out_proj", h, h, true);
    add_layer_norm(t, "layer_norm1", h);
    add_linear(t, "mlp.fc1", f, h, true);
    add_linear(t, "mlp.fc2", h, f, true);
    add_layer_norm(t, "layer_norm2", h);
  }
  layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(4 * h * h + 2 * h * f);
  layer.flops.attention_flops_per_token_per_position = 4.0 * static_cast<double>(h);
  layer.flops.causal_attention = false;  // every patch attends to every patch
  // Korthikanti et al. 2022 §4.2 without dropout (attention_probs_dropout_prob / attention_dropout 0 in the released
  // checkpoints): 5h attention, h + 2f MLP, 2h LayerNorm inputs; the softmax output per head and position. The torch
  // bridge measures torchvision's ViT-B/16 block at 12292 = 8h + 2f + 4 elements per token (LayerNorm statistics).
  layer.activations.elements_per_token = static_cast<double>(8 * h + 2 * f);
  layer.activations.score_elements_per_token_per_position = static_cast<double>(shape.heads);
  layer.activations.flash_stat_bytes_per_token = 4.0 * static_cast<double>(shape.heads);
  layer.activations.checkpoint_elements_per_token = static_cast<double>(h);
  layer.kernels = encoder_block_kernels(shape);
  layer.activations.selective_op_elements_per_token = selective_op_kept_elements(*layer.kernels, h);
  return layer;
}

// Patch embedding: a Conv2d with stride = kernel = patch is one GEMM per patch of (channels·patch²) → hidden; it keeps
// its input, channels·patch² elements per patch. CLIP adds a class embedding and learned positions for patches + 1;
// ViT a cls_token and position_embeddings of the same count; SigLIP positions for the patches only.
LayerSpec patch_embedding(const VisionShape& shape, VisionKind kind, const std::string& name) {
  const std::int64_t h = shape.hidden, p = shape.patch, c = shape.channels, positions = shape.patches();
  LayerSpec layer;
  layer.name = name;
  layer.kind = LayerKind::other;  // a convolution, not a lookup (LayerKind::embedding's kernels are a gather)
  auto& t = layer.tensors;
  if (kind == VisionKind::vit || kind == VisionKind::vit_classifier) {
    t = {{"cls_token", {1, 1, h}}, {"position_embeddings", {1, positions + 1, h}},
         {"patch_embeddings.projection.weight", {h, c, p, p}}, {"patch_embeddings.projection.bias", {h}}};
  } else if (kind == VisionKind::clip) {
    t = {{"class_embedding", {h}}, {"patch_embedding.weight", {h, c, p, p}},
         {"position_embedding.weight", {positions + 1, h}}};  // CLIP's patch conv has no bias
  } else {
    t = {{"patch_embedding.weight", {h, c, p, p}}, {"patch_embedding.bias", {h}},
         {"position_embedding.weight", {positions, h}}};
  }
  layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(c * p * p * h);
  layer.activations.elements_per_token = static_cast<double>(c * p * p);
  return layer;
}

LayerSpec plain_layer(const std::string& name, LayerKind kind, std::vector<TensorSpec> tensors, double flops,
                      double kept_elements) {
  LayerSpec layer;
  layer.name = name;
  layer.kind = kind;
  layer.tensors = std::move(tensors);
  layer.flops.matmul_flops_per_token = flops;
  layer.activations.elements_per_token = kept_elements;
  return layer;
}

// ViTForImageClassification's label count: num_labels, else the id2label map's size (PretrainedConfig), default 2.
std::int64_t label_count(const JsonObjectReader& config) {
  if (const auto labels = config.optional_int_in_range("num_labels", 1, limits::kMaxVocabSize)) return *labels;
  if (config.has("id2label")) {
    const auto& map = config.raw().at("id2label");
    if (!map.is_object() || map.empty()) config.fail("id2label", "an object mapping label ids to names");
    return static_cast<std::int64_t>(map.size());
  }
  return 2;
}

// SiglipMultiheadAttentionPoolingHead: a probe vector attends over the patches (nn.MultiheadAttention: in_proj
// 3h × h, out_proj), then LayerNorm and an MLP on the pooled vector. The keys and values are projections of every
// patch (2h² multiply-adds a token); the rest is per image.
LayerSpec siglip_head(const VisionShape& shape, const std::string& name, double per_image) {
  const std::int64_t h = shape.hidden, f = shape.intermediate;
  std::vector<TensorSpec> head = {{"probe", {1, 1, h}},
                                  {"attention.in_proj_weight", {3 * h, h}},
                                  {"attention.in_proj_bias", {3 * h}},
                                  {"attention.out_proj.weight", {h, h}},
                                  {"attention.out_proj.bias", {h}},
                                  {"layernorm.weight", {h}},
                                  {"layernorm.bias", {h}},
                                  {"mlp.fc1.weight", {f, h}},
                                  {"mlp.fc1.bias", {f}},
                                  {"mlp.fc2.weight", {h, f}},
                                  {"mlp.fc2.bias", {h}}};
  const double flops =
      2.0 * static_cast<double>(2 * h * h) + 2.0 * static_cast<double>(2 * h * h + 2 * h * f) * per_image;
  return plain_layer(name, LayerKind::other, std::move(head), flops, 3.0 * static_cast<double>(h));
}

// The encoder as a vision model (transformers' *VisionModel / ViTModel) holds it: embeddings, CLIP's pre_layrnorm,
// the blocks, the final norm and SigLIP's head; the ViT pooler and classifier are the caller's.
VisionTower build_tower(const JsonObjectReader& config, VisionKind kind, const std::string& prefix) {
  const VisionShape shape = read_shape(config, kind);
  const bool vit = kind == VisionKind::vit || kind == VisionKind::vit_classifier;
  const std::int64_t h = shape.hidden;
  VisionTower tower;
  tower.hidden_size = h;
  tower.num_heads = shape.heads;
  tower.patches = shape.patches();
  tower.tokens_per_image = shape.patches() + (kind == VisionKind::siglip ? 0 : 1);  // + the class token
  tower.stem.push_back(patch_embedding(shape, kind, prefix + "embeddings"));
  if (kind == VisionKind::clip) {
    tower.stem.push_back(plain_layer(prefix + "pre_layrnorm", LayerKind::norm, {{"weight", {h}}, {"bias", {h}}}, 0.0,
                                     static_cast<double>(h)));
  }
  const std::string blocks = prefix + (vit ? "encoder.layer." : "encoder.layers.");
  for (std::int64_t index = 0; index < shape.layers; ++index) {
    tower.blocks.push_back(encoder_block(shape, kind, blocks + std::to_string(index)));
  }
  const std::vector<TensorSpec> final_norm = {{"weight", {h}}, {"bias", {h}}};
  tower.tail.push_back(plain_layer(prefix + (vit ? "layernorm" : "post_layernorm"), LayerKind::norm, final_norm, 0.0,
                                   static_cast<double>(h)));
  if (kind == VisionKind::siglip && config.boolean("vision_use_head", true)) {
    tower.tail.push_back(siglip_head(shape, prefix + "head", 1.0 / static_cast<double>(tower.tokens_per_image)));
  }
  return tower;
}

}  // namespace

bool is_hf_vision_config(const nlohmann::json& document) { return detect(document).has_value(); }

VisionTower vision_tower_from_hf_config(const JsonObjectReader& config, const std::string& prefix) {
  // LlavaConfig reads a vision_config dict without model_type as CLIP's (configuration_llava.py, transformers 4.45).
  const std::string model_type = config.optional_string("model_type").value_or("clip_vision_model");
  if (model_type == "clip_vision_model") return build_tower(config, VisionKind::clip, prefix);
  if (model_type == "siglip_vision_model") return build_tower(config, VisionKind::siglip, prefix);
  config.fail("model_type", "clip_vision_model or siglip_vision_model (the vision towers supported), got '" +
                                model_type + "'");
}

ModelSpec vision_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                      const std::string& origin) {
  const VisionKind kind = detect(document).value();
  const JsonObjectReader config(document, origin);
  const bool vit = kind == VisionKind::vit || kind == VisionKind::vit_classifier;
  const std::string prefix = kind == VisionKind::vit_classifier ? "vit." : vit ? "" : "vision_model.";
  VisionTower tower = build_tower(config, kind, prefix);
  const std::int64_t h = tower.hidden_size;
  const double per_image = 1.0 / static_cast<double>(tower.tokens_per_image);  // a head that reads one vector

  ModelSpec model;
  model.name = name;
  model.hidden_size = h;
  model.num_heads = tower.num_heads;
  model.default_seq_len = tower.tokens_per_image;
  for (auto* part : {&tower.stem, &tower.blocks, &tower.tail}) {
    for (LayerSpec& layer : *part) model.layers.push_back(std::move(layer));
  }
  if (kind == VisionKind::vit && config.boolean("add_pooling_layer", true)) {
    // ViTPooler: dense + tanh on the class token.
    model.layers.push_back(plain_layer("pooler", LayerKind::other, {{"dense.weight", {h, h}}, {"dense.bias", {h}}},
                                       2.0 * static_cast<double>(h * h) * per_image, h * per_image));
  } else if (kind == VisionKind::vit_classifier) {
    const std::int64_t labels = label_count(config);
    model.layers.push_back(plain_layer("classifier", LayerKind::other,
                                       {{"weight", {labels, h}}, {"bias", {labels}}},
                                       2.0 * static_cast<double>(h * labels) * per_image, h * per_image));
  }
  validate_model(model, origin);
  return model;
}

}  // namespace shardplan
