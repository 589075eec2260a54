// Llama 4's RoPE / NoPE layers, attention chunks and their kernels, read from a text config (configuration_llama4.py,
// modeling_llama4.py).
#include "hf_arch_llama4_attention.h"

#include <algorithm>
#include <string>

#include "block_kernels.h"
#include "input_limits.h"

namespace shardplan {

// Which decoder layers apply RoPE (Llama4TextAttention.use_rope = config.no_rope_layers[layer_idx]): no_rope_layers
// (1: RoPE, 0: NoPE; None or empty: a NoPE layer every no_rope_layer_interval-th, default 4: int((i + 1) % interval
// != 0)), as Llama4TextConfig's __post_init__ fills it in (configuration_llama4.py).
std::vector<bool> rope_layers(const JsonObjectReader& text, std::int64_t layers) {
  std::vector<nlohmann::json> flags;
  if (text.has("no_rope_layers") && !text.raw().at("no_rope_layers").is_null()) {
    flags = text.array("no_rope_layers", true);
  }
  const std::int64_t interval = text.optional_int_in_range("no_rope_layer_interval", 1, limits::kMaxLayers).value_or(4);
  std::vector<bool> rope;
  for (std::int64_t i = 0; i < layers; ++i) rope.push_back((i + 1) % interval != 0);
  if (!flags.empty() && static_cast<std::int64_t>(flags.size()) < layers) {
    text.fail("no_rope_layers", "one flag per layer (" + std::to_string(layers) + ")");
  }
  for (std::size_t i = 0; i < flags.size(); ++i) {
    if (!JsonObjectReader::integer_in(flags[i], 0, 1)) text.fail("no_rope_layers", "a list of 0 (NoPE) and 1 (RoPE)");
    if (i < rope.size()) rope[i] = flags[i] == 1;
  }
  return rope;
}

// Each decoder layer's attention chunk (0: the layer attends to every earlier position), as Llama4TextConfig's
// __post_init__ derives layer_types (configuration_llama4.py): "chunked_attention" to the RoPE layers (rope_layers)
// and "full_attention" to the rest, unless layer_types lists them. Llama4TextModel.forward hands the chunked layers
// create_chunked_causal_mask's mask over attention_chunk_size (default 8192) positions (Note [Chunked attention]);
// that mask needs a chunk size, so a null one with chunked layers is refused.
std::vector<std::int64_t> chunk_sizes(const JsonObjectReader& text, std::int64_t layers) {
  std::vector<bool> chunked;
  if (text.has("layer_types") && !text.raw().at("layer_types").is_null()) {
    for (const nlohmann::json& type : text.array("layer_types")) {
      if (!type.is_string() || (type != "chunked_attention" && type != "full_attention")) {
        text.fail("layer_types", "a list of 'chunked_attention' and 'full_attention'");
      }
      chunked.push_back(type == "chunked_attention");
    }
  } else {
    chunked = rope_layers(text, layers);
  }
  if (static_cast<std::int64_t>(chunked.size()) != layers) {
    text.fail("layer_types", "one entry per layer (" + std::to_string(layers) + ")");
  }
  std::int64_t chunk = 8192;
  if (text.has("attention_chunk_size")) {
    chunk = text.raw().at("attention_chunk_size").is_null()
                ? 0
                : text.int_in_range("attention_chunk_size", 1, limits::kMaxPositions);
  }
  std::vector<std::int64_t> sizes;
  for (const bool slides : chunked) {
    if (slides && chunk == 0) text.fail("attention_chunk_size", "a chunk size for the chunked_attention layers");
    sizes.push_back(slides ? chunk : 0);
  }
  return sizes;
}

// Note [Llama 4 attention kernels]: Llama4TextAttention.forward (modeling_llama4.py) differs from LlamaAttention's
// by layer. A RoPE layer rotates q and k, then, with use_qk_norm, normalises each head of both with
// Llama4TextL2Norm — x.float() · rsqrt(mean(x²) + eps), cast back, no weight: to(float32) [read w, write w fp32],
// pow [w fp32 in, w fp32 out], mean [read w fp32], · rsqrt [w fp32 in, w fp32 out], type_as [w fp32 in, w out],
// 2w + 6w elements in 5 kernels for each of q and k. A NoPE layer skips the rotation and, with
// attn_temperature_tuning (truthy: transformers tests `if self.attn_temperature_tuning and not self.use_rope`),
// scales the query by a per-position temperature: query · attn_scales (fp32, so the product is fp32) [read q, write
// q fp32], .to(query dtype) [q fp32 in, q out]; the s scales themselves are negligible. What these kernels keep for
// backward is not added to the block's activations.
void llama4_attention_kernels(LayerKernelSpec& kernels, const DecoderArchitecture& arch, bool rope, bool qk_l2_norm,
                              bool temperature) {
  const double q = static_cast<double>(arch.q_dim()), kv = static_cast<double>(arch.kv_dim());
  auto& ops = kernels.elementwise;
  const auto rotary = std::find_if(ops.begin(), ops.end(), [](const ElementwiseSpec& op) { return op.name == "rotary"; });
  if (rotary == ops.end()) return;  // built by llama_block_kernels, which always rotates
  if (rope && qk_l2_norm) {
    ops.insert(rotary + 1, elementwise_kernel("q/k L2 norm", 2.0 * (q + kv), 6.0 * (q + kv), 10));
  } else if (!rope) {
    const auto at = ops.erase(rotary);
    if (temperature) ops.insert(at, elementwise_kernel("attention temperature", 2.0 * q, 2.0 * q, 2));
  }
}

// attn_temperature_tuning: a flag in current configs, a number in the released ones (4); Python's truth either way.
bool temperature_tuning(const JsonObjectReader& text) {
  if (!text.has("attn_temperature_tuning") || text.raw().at("attn_temperature_tuning").is_null()) return true;
  const nlohmann::json& value = text.raw().at("attn_temperature_tuning");
  if (value.is_boolean()) return value.get<bool>();
  return text.number_in_range("attn_temperature_tuning", 0, 1e6) != 0;
}

}  // namespace shardplan
