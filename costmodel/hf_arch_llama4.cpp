// Hugging Face Llama 4 configs → ModelSpec: text_config (the MoE decoder with a shared expert, dense and MoE layers
// interleaved) and vision_config (the vision encoder, pixel-shuffle adapter and projector), in forward order.
#include "hf_arch_llama4.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "block_kernels.h"
#include "decoder_builder.h"
#include "hf_arch_llama4_attention.h"
#include "input_limits.h"
#include "json_input.h"
#include "vision_splice.h"

namespace shardplan {
namespace {

bool names_class(const nlohmann::json& document, std::string_view class_name, std::string_view model_type) {
  const auto architectures = document.find("architectures");
  if (architectures != document.end() && architectures->is_array() && !architectures->empty() &&
      architectures->front().is_string()) {
    return architectures->front() == class_name;
  }
  const auto type = document.find("model_type");
  return type != document.end() && type->is_string() && *type == model_type;
}

// Llama4TextConfig (transformers/models/llama4/configuration_llama4.py) and modeling_llama4.py:
//   - Llama4TextAttention: q/k/v/o_proj with bias=config.attention_bias (false), head_dim (128); its qk_norm is
//     Llama4TextL2Norm — no weight — on the RoPE layers (use_qk_norm): no parameter. no_rope_layers (a 0 every
//     no_rope_layer_interval-th layer) drops RoPE there: no tensor. Their kernels: Note [Llama 4 attention kernels].
//   - Llama4TextDecoderLayer: input_layernorm and post_attention_layernorm (RMSNorm); feed_forward is Llama4TextMoe
//     on the layers of moe_layers (default: every interleave_moe_layer_step-th, range(step − 1, L, step)), else a
//     Llama4TextMLP of intermediate_size_mlp (gate, up, down; SwiGLU).
//   - Llama4TextMoe: router = Linear(hidden, num_local_experts, bias=False) with top-k (num_experts_per_tok) sigmoid
//     scores; experts = Llama4TextExperts, stacked: gate_up_proj [E, hidden, 2·intermediate_size], down_proj
//     [E, intermediate_size, hidden]; shared_expert = Llama4TextMLP(intermediate_size), always on, summed with the
//     routed output. The expert work is a SwiGLU per routed slot plus the shared one: MoeArchitecture with a shared
//     expert of intermediate_size, as Qwen2-MoE's without its gate, and the stacked names (Note [Llama 4 names]).
//   - layer_types / attention_chunk_size: the RoPE layers attend within chunks of 8192 positions
//     (create_chunked_causal_mask), the NoPE layers to every earlier position (chunk_sizes below; Note [Chunked
//     attention] in kernel_spec.h). The parameters do not depend on it.
DecoderArchitecture text_architecture(const JsonObjectReader& text) {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::llama;
  const auto size = [&](std::string_view key, std::int64_t fallback, std::int64_t most) {
    return text.optional_int_in_range(key, 1, most).value_or(fallback);
  };
  arch.vocab_size = size("vocab_size", 202048, limits::kMaxVocabSize);
  arch.hidden_size = size("hidden_size", 5120, limits::kMaxHiddenSize);
  arch.intermediate_size = size("intermediate_size_mlp", 16384, limits::kMaxIntermediateSize);
  arch.num_layers = size("num_hidden_layers", 48, limits::kMaxLayers);
  arch.num_heads = size("num_attention_heads", 40, limits::kMaxHeads);
  arch.num_kv_heads = text.has("num_key_value_heads") && !text.raw().at("num_key_value_heads").is_null()
                          ? text.int_in_range("num_key_value_heads", 1, limits::kMaxHeads)
                          : arch.num_heads;
  arch.max_position_embeddings = size("max_position_embeddings", 4096 * 32, limits::kMaxPositions);
  arch.tie_word_embeddings = text.boolean("tie_word_embeddings", false);
  arch.attention_bias = text.boolean("attention_bias", false);
  arch.o_proj_bias = arch.attention_bias;
  const std::int64_t head_dim = size("head_dim", 128, limits::kMaxHiddenSize);
  if (head_dim * arch.num_heads != arch.hidden_size) arch.explicit_head_dim = head_dim;
  // Note [Long context] (model_spec.h): the released configs' llama3 RoPE scaling, factor × original positions.
  if (text.has("rope_scaling") && !text.raw().at("rope_scaling").is_null()) {
    const JsonObjectReader scaling = text.object("rope_scaling");
    if (const auto factor = scaling.optional_number_in_range("factor", 1.0, 1e6)) {
      const double original = static_cast<double>(
          scaling.optional_int_in_range("original_max_position_embeddings", 1, limits::kMaxPositions)
              .value_or(arch.max_position_embeddings));
      arch.rope_scaled_positions =
          static_cast<std::int64_t>(std::min(*factor * original, static_cast<double>(limits::kMaxPositions)));
    }
  }
  MoeArchitecture moe;
  moe.naming = MoeNaming::qwen;  // renamed to Llama 4's modules after the build (Note [Llama 4 names])
  moe.num_experts = text.optional_int_in_range("num_local_experts", 1, 65536).value_or(16);
  moe.experts_per_token = text.optional_int_in_range("num_experts_per_tok", 1, moe.num_experts).value_or(1);
  moe.expert_intermediate_size = size("intermediate_size", 8192, limits::kMaxIntermediateSize);
  moe.shared_intermediate_size = moe.expert_intermediate_size;
  moe.sparse_step = size("interleave_moe_layer_step", 1, limits::kMaxLayers);
  if (text.has("moe_layers") && !text.raw().at("moe_layers").is_null()) {
    std::vector<std::int64_t> expected;
    for (std::int64_t i = moe.sparse_step - 1; i < arch.num_layers; i += moe.sparse_step) expected.push_back(i);
    std::vector<std::int64_t> listed;
    for (const nlohmann::json& index : text.array("moe_layers", true)) {
      if (!JsonObjectReader::integer_in(index, 0, arch.num_layers - 1)) {
        text.fail("moe_layers", "layer indices from 0 to num_hidden_layers - 1");
      }
      listed.push_back(index.get<std::int64_t>());
    }
    if (listed != expected) {
      text.fail("moe_layers", "every interleave_moe_layer_step-th layer (" + std::to_string(moe.sparse_step) +
                                  "), as the released configs list them (other layouts are not modelled)");
    }
  }
  arch.moe = moe;
  // Read for their ranges only (see above): a malformed value is refused rather than ignored.
  (void)text.non_negative_number("router_aux_loss_coef", 0.001);
  return arch;
}

// Note [Llama 4 names]: the decoder builder lays out the MoE block under Qwen-MoE's module names (mlp.gate,
// mlp.experts.N.{gate,up,down}_proj, mlp.shared_expert.*) with the same parameters and work; the released checkpoints
// name them feed_forward.router, feed_forward.experts.gate_up_proj [E, h, 2·f] and down_proj [E, f, h] (every expert
// stacked in two tensors) and feed_forward.shared_expert.*, and the dense layers' MLP feed_forward.{gate,up,down}_proj.
// Renamed here, tensors and kernels both, so exports and LoRA targets see the real paths.
void rename_feed_forward(LayerSpec& block, std::int64_t experts, std::int64_t hidden, std::int64_t expert_width) {
  std::vector<TensorSpec> renamed;
  bool stacked = false;
  for (const TensorSpec& tensor : block.tensors) {
    if (tensor.name == "mlp.gate.weight") {
      renamed.push_back({"feed_forward.router.weight", tensor.shape});
    } else if (tensor.name.starts_with("mlp.experts.")) {
      if (!stacked) {
        renamed.push_back({"feed_forward.experts.gate_up_proj", {experts, hidden, 2 * expert_width}});
        renamed.push_back({"feed_forward.experts.down_proj", {experts, expert_width, hidden}});
        stacked = true;
      }
    } else if (tensor.name.starts_with("mlp.")) {
      renamed.push_back({"feed_forward." + tensor.name.substr(4), tensor.shape});
    } else {
      renamed.push_back(tensor);
    }
  }
  block.tensors = std::move(renamed);
  if (!block.kernels) return;
  for (ProjectionSpec& projection : block.kernels->projections) {
    if (projection.name == "mlp.gate") {
      projection.name = "feed_forward.router";
    } else if (projection.name == "mlp.experts.gate_proj" || projection.name == "mlp.experts.up_proj") {
      projection.name = "feed_forward.experts.gate_up_proj";
    } else if (projection.name.starts_with("mlp.")) {
      projection.name = "feed_forward." + projection.name.substr(4);
    }
  }
}

// Llama4VisionConfig: hidden_size 1408 (class default 768), intermediate_size 5632, num_hidden_layers 34,
// num_attention_heads 16, num_channels 3, image_size 336 (class default 448), patch_size 14, pixel_shuffle_ratio 0.5,
// projector_input_dim 4096, projector_output_dim 4096, vision_output_dim 4096 (the released values).
struct VisionShape {
  std::int64_t width = 1408, intermediate = 5632, layers = 34, heads = 16, channels = 3, image = 336, patch = 14,
               projector_in = 4096, projector_out = 4096, output = 4096;
  double shuffle = 0.5;
  std::int64_t patches() const { return (image / patch) * (image / patch); }
};

VisionShape read_vision(const JsonObjectReader& vision) {
  VisionShape shape;
  const auto size = [&](std::string_view key, std::int64_t fallback, std::int64_t most) {
    return vision.optional_int_in_range(key, 1, most).value_or(fallback);
  };
  shape.width = size("hidden_size", 768, limits::kMaxHiddenSize);
  shape.intermediate = size("intermediate_size", 5632, limits::kMaxIntermediateSize);
  shape.layers = size("num_hidden_layers", 34, limits::kMaxLayers);
  shape.heads = size("num_attention_heads", 16, limits::kMaxHeads);
  shape.channels = size("num_channels", 3, 64);
  shape.image = size("image_size", 448, 1 << 16);
  shape.patch = size("patch_size", 14, 1 << 16);
  shape.projector_in = size("projector_input_dim", 4096, limits::kMaxHiddenSize);
  shape.projector_out = size("projector_output_dim", 4096, limits::kMaxHiddenSize);
  shape.output = size("vision_output_dim", 7680, limits::kMaxHiddenSize);
  shape.shuffle = vision.optional_number_in_range("pixel_shuffle_ratio", 1e-3, 1.0).value_or(0.5);
  if (shape.width % shape.heads != 0) vision.fail("num_attention_heads", "a divisor of hidden_size");
  if (shape.patch > shape.image) vision.fail("patch_size", "at most image_size");
  // Llama4VisionMLP2: fc1 reads intermediate_size = hidden_size / pixel_shuffle_ratio² channels, the shuffled width.
  const double shuffled = static_cast<double>(shape.width) / (shape.shuffle * shape.shuffle);
  if (std::llround(shuffled) != shape.intermediate) {
    vision.fail("intermediate_size", "hidden_size / pixel_shuffle_ratio² (" + std::to_string(std::llround(shuffled)) +
                                         "), the width fc1 of the pixel-shuffle adapter reads");
  }
  if (shape.projector_out != shape.output) {
    vision.fail("vision_output_dim", "projector_output_dim (" + std::to_string(shape.projector_out) +
                                         "): multi_modal_projector reads the adapter's output");
  }
  if (vision.boolean("multi_modal_projector_bias", false)) {
    vision.fail("multi_modal_projector_bias", "false (Llama4MultiModalProjector.linear_1 has no bias)");
  }
  return shape;
}

LayerSpec plain_layer(const std::string& name, LayerKind kind, std::vector<TensorSpec> tensors, double flops,
                      double kept, std::int64_t tokens) {
  LayerSpec layer;
  layer.name = name;
  layer.kind = kind;
  layer.tensors = std::move(tensors);
  layer.flops.matmul_flops_per_token = flops;
  layer.flops.causal_attention = false;
  layer.activations.elements_per_token = kept;
  layer.fixed_tokens_per_sample = tokens;
  return layer;
}

// Llama4VisionEncoderLayer: input_layernorm, self_attn (q/k/v/o_proj with biases, 2-D RoPE on q and k, not causal),
// residual, post_attention_layernorm, mlp (fc1, GELU, fc2 with biases), residual — CLIP's block with other names,
// counted as hf_arch_vision.cpp counts it (8h + 2f kept per token with flash attention).
LayerSpec vision_block(const VisionShape& shape, std::int64_t index, std::int64_t tokens) {
  const std::int64_t h = shape.width, f = shape.intermediate;
  const double hd = static_cast<double>(h), fd = static_cast<double>(f);
  LayerSpec layer;
  layer.name = "vision_model.model.layers." + std::to_string(index);
  layer.kind = LayerKind::transformer_block;
  for (const char* projection : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    layer.tensors.push_back({std::string("self_attn.") + projection + ".weight", {h, h}});
    layer.tensors.push_back({std::string("self_attn.") + projection + ".bias", {h}});
  }
  layer.tensors.push_back({"mlp.fc1.weight", {f, h}});
  layer.tensors.push_back({"mlp.fc1.bias", {f}});
  layer.tensors.push_back({"mlp.fc2.weight", {h, f}});
  layer.tensors.push_back({"mlp.fc2.bias", {h}});
  for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) {
    layer.tensors.push_back({std::string(norm) + ".weight", {h}});
    layer.tensors.push_back({std::string(norm) + ".bias", {h}});
  }
  layer.flops.matmul_flops_per_token = 2.0 * static_cast<double>(4 * h * h + 2 * h * f);
  layer.flops.attention_flops_per_token_per_position = 4.0 * hd;
  layer.flops.causal_attention = false;
  layer.activations.elements_per_token = 8.0 * hd + 2.0 * fd;
  layer.activations.score_elements_per_token_per_position = static_cast<double>(shape.heads);
  layer.activations.flash_stat_bytes_per_token = 4.0 * static_cast<double>(shape.heads);
  layer.activations.checkpoint_elements_per_token = hd;
  LayerKernelSpec kernels;
  kernels.projections = {{"q_proj", h, h, true},   {"k_proj", h, h, false}, {"v_proj", h, h, true},
                         {"o_proj", h, h, false}, {"fc1", h, f, true},     {"fc2", f, h, false}};
  kernels.attention = AttentionSpec{shape.heads, h / shape.heads, false};
  kernels.elementwise.push_back(elementwise_kernel("layernorm", 2.0 * hd, 0.0, 1));
  kernels.elementwise.push_back(elementwise_kernel("rotary", 0.0, 10.0 * 2.0 * hd, 10));
  kernels.elementwise.push_back(elementwise_kernel("residual add", 3.0 * hd, 0.0, 1));
  kernels.elementwise.push_back(elementwise_kernel("layernorm", 2.0 * hd, 0.0, 1));
  kernels.elementwise.push_back(elementwise_kernel("gelu", 2.0 * fd, 0.0, 1));
  ElementwiseSpec last_add = elementwise_kernel("residual add", 3.0 * hd, 0.0, 1);
  last_add.recomputed_by_op_policy = false;
  kernels.elementwise.push_back(last_add);
  layer.kernels = kernels;
  layer.activations.selective_op_elements_per_token = selective_op_kept_elements(*layer.kernels, h);
  layer.fixed_tokens_per_sample = tokens;
  return layer;
}

// Note [Llama 4 image]: Llama4VisionModel.forward runs one tile of image_size² pixels (the processor cuts larger
// images into tiles plus a global view; shardplan plans one tile per sample): patch_embedding (Llama4UnfoldConvolution:
// unfold into patches, Linear(channels·patch², hidden, bias=False)), the class embedding appended, positional_embedding_vlm
// [patches + 1, hidden] added, layernorm_pre, the encoder layers over patches + 1 tokens, layernorm_post, the class
// token dropped, then vision_adapter (Llama4VisionPixelShuffleMLP: pixel_shuffle by pixel_shuffle_ratio — patches ×
// ratio² tokens of hidden / ratio² — then Llama4VisionMLP2: fc1 (→ projector_input_dim), GELU, fc2
// (→ projector_output_dim), GELU, no biases), and multi_modal_projector.linear_1 (vision_output_dim → text hidden,
// no bias) on those tokens. Layers as Note [LLaVA layout] orders them: the stem and layernorm_post before the blocks,
// the adapter and the projector after them as wrap candidates.
std::vector<LayerSpec> vision_layers(const VisionShape& shape, std::int64_t text_hidden) {
  const std::int64_t h = shape.width, p = shape.patch, c = shape.channels;
  const std::int64_t tokens = shape.patches() + 1;
  const auto image_tokens =
      static_cast<std::int64_t>(std::llround(static_cast<double>(shape.patches()) * shape.shuffle * shape.shuffle));
  const double hd = static_cast<double>(h);
  std::vector<LayerSpec> layers;
  layers.push_back(plain_layer("vision_model", LayerKind::other,
                               {{"patch_embedding.linear.weight", {h, c * p * p}},
                                {"class_embedding", {h}},
                                {"positional_embedding_vlm", {tokens, h}},
                                {"layernorm_pre.weight", {h}},
                                {"layernorm_pre.bias", {h}}},
                               2.0 * static_cast<double>(c * p * p * h), static_cast<double>(c * p * p) + hd, tokens));
  layers.push_back(plain_layer("vision_model.layernorm_post", LayerKind::norm, {{"weight", {h}}, {"bias", {h}}}, 0.0,
                               hd, tokens));
  for (std::int64_t index = 0; index < shape.layers; ++index) layers.push_back(vision_block(shape, index, tokens));
  const std::int64_t f = shape.intermediate, in = shape.projector_in, out = shape.projector_out;
  LayerSpec adapter = plain_layer(
      "vision_model.vision_adapter", LayerKind::transformer_block,
      {{"mlp.fc1.weight", {in, f}}, {"mlp.fc2.weight", {out, out}}},
      2.0 * static_cast<double>(f * in + out * out),
      static_cast<double>(f + 2 * in + 2 * out), image_tokens);  // fc1's input, each GELU's input and output
  LayerKernelSpec adapter_kernels;
  adapter_kernels.projections = {{"mlp.fc1", f, in, true}, {"mlp.fc2", out, out, false}};
  adapter_kernels.elementwise.push_back(elementwise_kernel("pixel shuffle", 2.0 * static_cast<double>(f), 0.0, 2));
  adapter_kernels.elementwise.push_back(elementwise_kernel("gelu", 2.0 * static_cast<double>(in + out), 0.0, 2));
  adapter.kernels = adapter_kernels;
  adapter.activations.checkpoint_elements_per_token = static_cast<double>(f);
  adapter.activations.selective_op_elements_per_token = selective_op_kept_elements(adapter_kernels, f);
  layers.push_back(adapter);
  LayerSpec projector = plain_layer("multi_modal_projector", LayerKind::transformer_block,
                                    {{"linear_1.weight", {text_hidden, shape.output}}},
                                    2.0 * static_cast<double>(shape.output * text_hidden),
                                    static_cast<double>(shape.output), image_tokens);
  LayerKernelSpec projector_kernels;
  projector_kernels.projections = {{"linear_1", shape.output, text_hidden, true}};
  projector.kernels = projector_kernels;
  projector.activations.checkpoint_elements_per_token = static_cast<double>(shape.output);
  projector.activations.selective_op_elements_per_token = selective_op_kept_elements(projector_kernels, shape.output);
  layers.push_back(projector);
  return layers;
}

}  // namespace

bool is_hf_llama4_config(const nlohmann::json& document) {
  if (!document.is_object()) return false;
  return names_class(document, "Llama4ForConditionalGeneration", "llama4") ||
         names_class(document, "Llama4ForCausalLM", "llama4_text");
}

ModelSpec llama4_model_from_hf_config(const nlohmann::json& document, const std::string& name,
                                      const std::string& origin) {
  const JsonObjectReader config(document, origin);
  const bool multimodal = names_class(document, "Llama4ForConditionalGeneration", "llama4");
  const JsonObjectReader text = multimodal ? config.object("text_config") : config;
  const DecoderArchitecture arch = text_architecture(text);
  const std::vector<std::int64_t> chunks = chunk_sizes(text, arch.num_layers);
  const std::vector<bool> rope = rope_layers(text, arch.num_layers);
  const bool qk_l2_norm = text.boolean("use_qk_norm", true), temperature = temperature_tuning(text);
  ModelSpec decoder = build_decoder(name, arch, origin);
  std::size_t block = 0;
  for (LayerSpec& layer : decoder.layers) {
    if (layer.kind != LayerKind::transformer_block) continue;
    rename_feed_forward(layer, arch.moe->num_experts, arch.hidden_size, arch.moe->expert_intermediate_size);
    if (layer.kernels) llama4_attention_kernels(*layer.kernels, arch, rope[block], qk_l2_norm, temperature);
    if (const std::int64_t chunk = chunks[block++]; chunk > 0) {  // Note [Chunked attention]
      layer.flops.attention_window = chunk;
      layer.flops.attention_chunked = true;
      if (layer.kernels && layer.kernels->attention) {
        layer.kernels->attention->window = chunk;
        layer.kernels->attention->chunked = true;
      }
    }
  }
  // The architecture stays off the model: its module names are Qwen-MoE's until renamed, and the runtime and tensor
  // parallelism build blocks from it (both refuse MoE blocks today).
  decoder.max_positions = decoder.max_trainable_positions();  // Note [Long context], kept past the architecture
  decoder.architecture.reset();
  if (!multimodal) {
    validate_model(decoder, origin);
    return decoder;
  }
  if (config.boolean("tie_word_embeddings", false)) {
    config.fail("tie_word_embeddings", "false (Llama4ForConditionalGeneration's language model keeps its lm_head)");
  }
  std::vector<LayerSpec> vision = vision_layers(read_vision(config.object("vision_config")), decoder.hidden_size);
  return splice_vision_after_embedding(std::move(decoder), std::move(vision), "language_model.", origin);
}

}  // namespace shardplan
