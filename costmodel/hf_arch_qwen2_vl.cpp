// Hugging Face Qwen2-VL / Qwen2.5-VL configs → ModelSpec: vision_config (the vision transformer and its patch
// merger) and the Qwen2 language model, in the order Qwen2VLForConditionalGeneration.forward runs them.
#include "hf_arch_qwen2_vl.h"

#include <string_view>
#include <vector>

#include "block_kernels.h"
#include "decoder_builder.h"
#include "hf_config.h"
#include "input_limits.h"
#include "json_input.h"
#include "vision_splice.h"

namespace shardplan {
namespace {

// The vision tower's shape, from Qwen2VLVisionConfig (transformers/models/qwen2_vl/configuration_qwen2_vl.py:
// depth 32, embed_dim 1280, hidden_size 3584 — the merger's output, the language model's width — mlp_ratio 4,
// num_heads 16, in_channels 3, patch_size 14, spatial_merge_size 2, temporal_patch_size 2, hidden_act quick_gelu) or
// Qwen2_5_VLVisionConfig (qwen2_5_vl/configuration_qwen2_5_vl.py: hidden_size is the tower's own width, default
// 3584, 1280 in every release; intermediate_size 3420; out_hidden_size 3584, the merger's output; hidden_act silu;
// window_size 112; fullatt_block_indexes [7, 15, 23, 31]).
struct VisionShape {
  bool v25 = false;  // Qwen2.5-VL: RMSNorms, a SwiGLU MLP with biases, window attention
  std::int64_t width = 1280, intermediate = 5120, depth = 32, heads = 16, channels = 3, patch = 14, temporal = 2,
               merge = 2, out_width = 3584, window_patches = 0;
  std::vector<bool> full_attention;  // Qwen2.5-VL: which blocks attend over the whole image
  std::int64_t patch_inputs() const { return channels * temporal * patch * patch; }
};

VisionShape read_vision(const JsonObjectReader& vision, bool v25) {
  VisionShape shape;
  shape.v25 = v25;
  const auto size = [&](std::string_view key, std::int64_t fallback, std::int64_t most) {
    return vision.optional_int_in_range(key, 1, most).value_or(fallback);
  };
  shape.depth = size("depth", 32, limits::kMaxLayers);
  shape.heads = size("num_heads", 16, limits::kMaxHeads);
  shape.channels = size("in_channels", 3, 64);
  shape.patch = size("patch_size", 14, 1 << 12);
  shape.temporal = size("temporal_patch_size", 2, 64);
  shape.merge = size("spatial_merge_size", 2, 64);
  if (v25) {
    shape.width = size("hidden_size", 3584, limits::kMaxHiddenSize);
    shape.intermediate = size("intermediate_size", 3420, limits::kMaxIntermediateSize);
    shape.out_width = size("out_hidden_size", 3584, limits::kMaxHiddenSize);
    // Qwen2_5_VisionTransformerPretrainedModel.get_window_index: windows of window_size pixels, i.e.
    // window_size / spatial_merge_size / patch_size merged tokens per side, each merge² patches.
    const std::int64_t window = size("window_size", 112, 1 << 16);
    const std::int64_t unit = shape.patch * shape.merge;
    if (window % unit != 0) vision.fail("window_size", "a multiple of patch_size × spatial_merge_size");
    shape.window_patches = (window / shape.patch) * (window / shape.patch);
    shape.full_attention.assign(static_cast<std::size_t>(shape.depth), false);
    const std::vector<nlohmann::json> full =
        vision.has("fullatt_block_indexes") ? vision.array("fullatt_block_indexes", true)
                                            : std::vector<nlohmann::json>{7, 15, 23, 31};
    for (const nlohmann::json& index : full) {
      if (!JsonObjectReader::integer_in(index, 0, shape.depth - 1)) {
        vision.fail("fullatt_block_indexes", "block indices from 0 to depth - 1 (" + std::to_string(shape.depth - 1) +
                                                 ")");
      }
      shape.full_attention[index.get<std::size_t>()] = true;
    }
  } else {
    shape.width = size("embed_dim", 1280, limits::kMaxHiddenSize);
    // VisionMlp(dim=embed_dim, hidden_dim=int(embed_dim * mlp_ratio)).
    const double ratio = vision.optional_number_in_range("mlp_ratio", 1e-3, 1e3).value_or(4.0);
    shape.intermediate = static_cast<std::int64_t>(static_cast<double>(shape.width) * ratio);
    if (shape.intermediate < 1) vision.fail("mlp_ratio", "a ratio giving a positive MLP width");
    shape.out_width = size("hidden_size", 3584, limits::kMaxHiddenSize);
  }
  if (shape.width % shape.heads != 0) vision.fail("num_heads", "a divisor of the tower's width");
  if (vision.has("hidden_act")) (void)vision.string("hidden_act");  // one activation kernel whichever it is
  return shape;
}

// The text model's keys: text_config where the config nests one (transformers >= 4.52 saves it so), else the
// top-level keys the released config.json files carry, read as a Qwen2ForCausalLM (Qwen2VLTextModel and
// Qwen2_5_VLTextModel are Qwen2's decoder: q/k/v biases, o_proj none; mrope_section's rope_scaling names no factor).
nlohmann::json text_config(const JsonObjectReader& config) {
  nlohmann::json text = config.has("text_config") ? config.object("text_config").raw() : config.raw();
  text.erase("vision_config");
  text.erase("text_config");
  if (!text.contains("tie_word_embeddings") && config.has("tie_word_embeddings")) {
    text["tie_word_embeddings"] = config.raw().at("tie_word_embeddings");
  }
  text["architectures"] = {"Qwen2ForCausalLM"};
  text["model_type"] = "qwen2";
  return text;
}

void add_linear(std::vector<TensorSpec>& tensors, const std::string& prefix, std::int64_t out, std::int64_t in) {
  tensors.push_back({prefix + ".weight", {out, in}});
  tensors.push_back({prefix + ".bias", {out}});
}

// Qwen2VLVisionBlock: norm1 and norm2 nn.LayerNorm(embed_dim, eps=1e-6), attn = VisionAttention (qkv Linear(dim,
// 3·dim), proj Linear(dim, dim), both biased; 2-D rotary embeddings on q and k), mlp = VisionMlp (fc1, quick_gelu,
// fc2, biased). Qwen2_5_VLVisionBlock: norm1 and norm2 Qwen2RMSNorm (weight only), the same attention, mlp =
// Qwen2_5_VLMLP(bias=True): gate_proj, up_proj, SiLU, down_proj. Attention is not causal: every patch of an image
// attends to every other (cu_seqlens per image), or, in Qwen2.5-VL's windowed blocks, to the patches of its window.
LayerSpec vision_block(const VisionShape& shape, std::int64_t index, std::int64_t patches) {
  const std::int64_t h = shape.width, f = shape.intermediate;
  const double hd = static_cast<double>(h), fd = static_cast<double>(f);
  LayerSpec layer;
  layer.name = "visual.blocks." + std::to_string(index);
  layer.kind = LayerKind::transformer_block;
  auto& t = layer.tensors;
  t.push_back({"norm1.weight", {h}});
  if (!shape.v25) t.push_back({"norm1.bias", {h}});
  t.push_back({"norm2.weight", {h}});
  if (!shape.v25) t.push_back({"norm2.bias", {h}});
  add_linear(t, "attn.qkv", 3 * h, h);
  add_linear(t, "attn.proj", h, h);
  if (shape.v25) {
    add_linear(t, "mlp.gate_proj", f, h);
    add_linear(t, "mlp.up_proj", f, h);
    add_linear(t, "mlp.down_proj", h, f);
  } else {
    add_linear(t, "mlp.fc1", f, h);
    add_linear(t, "mlp.fc2", h, f);
  }
  const std::int64_t mlp_matrices = shape.v25 ? 3 : 2;
  layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(4 * h * h + mlp_matrices * h * f);
  layer.flops.attention_flops_per_token_per_position = 4.0 * hd;
  layer.flops.causal_attention = false;
  // Note [Sliding-window attention]: Qwen2.5-VL's windowed blocks attend within windows of window_patches patches
  // (flash_attn_varlen over cu_window_seqlens); the full ones over the image.
  if (shape.v25 && !shape.full_attention[static_cast<std::size_t>(index)] && shape.window_patches < patches) {
    layer.flops.attention_window = shape.window_patches;
  }
  // Kept for backward (Korthikanti et al. 2022 §4.2's accounting, flash attention, no dropout): both norms' inputs
  // (2h), qkv's input, q, k and v after RoPE (h + 3h), proj's input (h), the MLP's input (h) and its activations —
  // fc1's output and the GELU's (2f), or gate's, SiLU's and up's outputs and down's input (4f).
  layer.activations.elements_per_token = 8.0 * hd + (shape.v25 ? 4.0 : 2.0) * fd;
  layer.activations.score_elements_per_token_per_position = static_cast<double>(shape.heads);
  layer.activations.flash_stat_bytes_per_token = 4.0 * static_cast<double>(shape.heads);
  layer.activations.checkpoint_elements_per_token = hd;
  LayerKernelSpec kernels;
  kernels.projections = {{"qkv", h, 3 * h, true}, {"proj", h, h, false}};
  if (shape.v25) {
    kernels.projections.push_back({"gate_proj", h, f, true});
    kernels.projections.push_back({"up_proj", h, f, false});
    kernels.projections.push_back({"down_proj", f, h, true});
  } else {
    kernels.projections.push_back({"fc1", h, f, true});
    kernels.projections.push_back({"fc2", f, h, false});
  }
  kernels.attention = AttentionSpec{shape.heads, h / shape.heads, false, layer.flops.attention_window};
  // The norms as block_kernels.cpp counts them: RMSNorm as LlamaRMSNorm runs it (4h, 7h fp32, 8 kernels), LayerNorm
  // one fused kernel; apply_rotary_pos_emb_vision on q and k in fp32 as the decoder's rotary (10 elements per
  // element); the residual adds (3h); quick_gelu one kernel (f, f), SiLU·up two (5f).
  const auto norm = [&] {
    return shape.v25 ? elementwise_kernel("rmsnorm", 4.0 * hd, 7.0 * hd, 8) : elementwise_kernel("layernorm", 2.0 * hd, 0.0, 1);
  };
  kernels.elementwise.push_back(norm());
  kernels.elementwise.push_back(elementwise_kernel("rotary", 0.0, 10.0 * 2.0 * hd, 10));
  kernels.elementwise.push_back(elementwise_kernel("residual add", 3.0 * hd, 0.0, 1));
  kernels.elementwise.push_back(norm());
  kernels.elementwise.push_back(shape.v25 ? elementwise_kernel("silu * up", 5.0 * fd, 0.0, 2)
                                          : elementwise_kernel("quick_gelu", 2.0 * fd, 0.0, 1));
  ElementwiseSpec last_add = elementwise_kernel("residual add", 3.0 * hd, 0.0, 1);
  last_add.recomputed_by_op_policy = false;
  kernels.elementwise.push_back(last_add);
  layer.kernels = kernels;
  layer.activations.selective_op_elements_per_token = selective_op_kept_elements(*layer.kernels, h);
  layer.fixed_tokens_per_sample = patches;
  return layer;
}

// PatchEmbed / Qwen2_5_VisionPatchEmbed: Conv3d(in_channels, width, kernel = stride = [temporal_patch_size,
// patch_size, patch_size], bias=False) — one GEMM per patch of channels·temporal·patch² inputs (an image is repeated
// temporal_patch_size times to fill the kernel); it keeps its input.
LayerSpec patch_embed(const VisionShape& shape, std::int64_t patches) {
  LayerSpec layer;
  layer.name = "visual.patch_embed";
  layer.kind = LayerKind::other;  // a convolution, not a lookup
  layer.tensors = {{"proj.weight", {shape.width, shape.channels, shape.temporal, shape.patch, shape.patch}}};
  layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(shape.patch_inputs() * shape.width);
  layer.flops.causal_attention = false;
  layer.activations.elements_per_token = static_cast<double>(shape.patch_inputs());
  layer.fixed_tokens_per_sample = patches;
  return layer;
}

// PatchMerger (Qwen2-VL: ln_q nn.LayerNorm(context_dim, eps=1e-6)) / Qwen2_5_VLPatchMerger (ln_q Qwen2RMSNorm): ln_q
// over each patch, then each spatial_merge_size² neighbouring patches concatenated (view(-1, merge²·width)) through
// mlp = Sequential(Linear(merge²·width, merge²·width), GELU, Linear(merge²·width, out_width)), biased. Per merged
// token: the norm over merge² patches, two GEMMs, the GELU; it keeps the norm's input, the first GEMM's input, the
// GELU's input and output.
LayerSpec merger(const VisionShape& shape, std::int64_t merged_tokens) {
  const std::int64_t h = shape.width, m = shape.merge * shape.merge * shape.width, out = shape.out_width;
  const double md = static_cast<double>(m);
  LayerSpec layer;
  layer.name = "visual.merger";
  layer.kind = LayerKind::transformer_block;  // a wrap candidate between the towers (Note [LLaVA layout])
  layer.tensors = {{"ln_q.weight", {h}}};
  if (!shape.v25) layer.tensors.push_back({"ln_q.bias", {h}});
  add_linear(layer.tensors, "mlp.0", m, m);
  add_linear(layer.tensors, "mlp.2", out, m);
  layer.flops.matmul_flops_per_token = 2.0 * (md * md + md * static_cast<double>(out));
  layer.flops.causal_attention = false;  // no attention
  layer.activations.elements_per_token = 4.0 * md;
  layer.activations.checkpoint_elements_per_token = md;
  LayerKernelSpec kernels;
  kernels.projections = {{"mlp.0", m, m, true}, {"mlp.2", m, out, false}};
  kernels.elementwise.push_back(shape.v25 ? elementwise_kernel("ln_q", 4.0 * md, 7.0 * md, 8)
                                          : elementwise_kernel("ln_q", 2.0 * md, 0.0, 1));
  kernels.elementwise.push_back(elementwise_kernel("gelu", 2.0 * md, 0.0, 1));
  layer.kernels = kernels;
  layer.activations.selective_op_elements_per_token = selective_op_kept_elements(kernels, m);
  layer.fixed_tokens_per_sample = merged_tokens;
  return layer;
}

bool names_v25(const nlohmann::json& document) {
  const auto architectures = document.find("architectures");
  if (architectures != document.end() && architectures->is_array() && !architectures->empty() &&
      architectures->front().is_string()) {
    return architectures->front() == "Qwen2_5_VLForConditionalGeneration";
  }
  const auto model_type = document.find("model_type");
  return model_type != document.end() && model_type->is_string() && *model_type == "qwen2_5_vl";
}

}  // namespace

bool is_hf_qwen2_vl_config(const nlohmann::json& document) {
  if (!document.is_object()) return false;
  const auto architectures = document.find("architectures");
  if (architectures != document.end() && architectures->is_array() && !architectures->empty() &&
      architectures->front().is_string()) {
    return architectures->front() == "Qwen2VLForConditionalGeneration" ||
           architectures->front() == "Qwen2_5_VLForConditionalGeneration";
  }
  const auto model_type = document.find("model_type");
  return model_type != document.end() && model_type->is_string() &&
         (*model_type == "qwen2_vl" || *model_type == "qwen2_5_vl");
}

// Note [Qwen2-VL layout]: Qwen2VLForConditionalGeneration.forward (modeling_qwen2_vl.py; Qwen2.5-VL's likewise)
// embeds the text (embed_tokens), runs the vision tower on the image's patches (self.visual(pixel_values,
// grid_thw): patch_embed, the blocks, the merger) and scatters its merged tokens over the image tokens of the
// sequence, which the language model runs on. The layers in that order, as Note [LLaVA layout] places them: the
// embedding, the patch embedding (a root layer before the blocks), the vision blocks, the merger, the decoder. One
// image per sample (Note [Qwen2-VL image]).
ModelSpec qwen2_vl_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                        const std::string& origin) {
  const JsonObjectReader config(document, origin);
  const bool v25 = names_v25(document);
  const VisionShape shape = read_vision(config.object("vision_config"), v25);
  ModelSpec decoder =
      build_decoder(name, architecture_from_hf_config(text_config(config), origin + " (text)"), origin);
  if (shape.out_width != decoder.hidden_size) {
    config.object("vision_config")
        .fail(v25 ? "out_hidden_size" : "hidden_size",
              "the language model's hidden_size (" + std::to_string(decoder.hidden_size) +
                  "): the merger's output replaces its image-token embeddings");
  }
  const std::int64_t unit = shape.patch * shape.merge;  // pixels per merged token's side
  if (kQwen2VlImageSidePixels % unit != 0) {
    config.object("vision_config").fail("patch_size", "patch_size × spatial_merge_size dividing 448 pixels");
  }
  const std::int64_t side = kQwen2VlImageSidePixels / shape.patch;
  const std::int64_t patches = side * side;
  const std::int64_t merged_tokens = patches / (shape.merge * shape.merge);

  std::vector<LayerSpec> vision;
  vision.push_back(patch_embed(shape, patches));
  for (std::int64_t index = 0; index < shape.depth; ++index) vision.push_back(vision_block(shape, index, patches));
  vision.push_back(merger(shape, merged_tokens));
  return splice_vision_after_embedding(std::move(decoder), std::move(vision), "", origin);
}

}  // namespace shardplan
