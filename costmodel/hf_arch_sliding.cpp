// Which layers of a Hugging Face config attend to a sliding window, and how wide it is (Note [Sliding-window attention]).
#include "hf_arch.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "input_limits.h"

namespace shardplan {

// transformers' configs name a layer's attention in layer_types ("sliding_attention" or "full_attention", one entry
// per layer), and when a config has no list they derive one in __init__ / __post_init__ from the family's pattern
// (`family_pattern`). The modeling files then give a layer `sliding_window = config.sliding_window if
// config.layer_types[layer_idx] == "sliding_attention" else None` (modeling_gemma2.py, modeling_gemma3.py,
// modeling_qwen2.py, modeling_gpt_oss.py): a null window makes every layer attend in full, whatever layer_types
// says. `window` is that config.sliding_window, already read by the caller (0: null).
void read_sliding_layers(const JsonObjectReader& config, DecoderArchitecture& arch, std::int64_t window,
                         const std::function<bool(std::int64_t)>& family_pattern) {
  std::vector<bool> sliding;
  if (config.has("layer_types") && !config.raw().at("layer_types").is_null()) {
    for (const auto& entry : config.array("layer_types")) {
      if (!entry.is_string() || (entry != "sliding_attention" && entry != "full_attention")) {
        config.fail("layer_types", "a list of 'sliding_attention' and 'full_attention'");
      }
      sliding.push_back(entry == "sliding_attention");
    }
    if (static_cast<std::int64_t>(sliding.size()) != arch.num_layers) {
      config.fail("layer_types", "one entry per layer (" + std::to_string(arch.num_layers) + ")");
    }
  } else {
    for (std::int64_t i = 0; i < arch.num_layers; ++i) sliding.push_back(family_pattern(i));
  }
  bool any_sliding = false, all_sliding = true;
  for (const bool slides : sliding) {
    any_sliding = any_sliding || slides;
    all_sliding = all_sliding && slides;
  }
  if (window == 0 || !any_sliding) return;  // every layer attends in full
  arch.sliding_window = window;
  if (!all_sliding) arch.sliding_layers = std::move(sliding);
}

std::int64_t read_nullable_window(const JsonObjectReader& config, std::int64_t family_default) {
  if (!config.has("sliding_window")) return family_default;
  if (config.raw().at("sliding_window").is_null()) return 0;
  return config.int_in_range("sliding_window", 1, limits::kMaxPositions);
}

// MistralConfig (configuration_mistral.py): sliding_window defaults to 4096, and MistralAttention gives every layer
// that window (sliding_window=getattr(self.config, "sliding_window", None)); a layer_types key is ignored there (the
// config warns to use Ministral's classes for alternating layers). Mistral-7B-v0.1 names 4096; v0.2 and later null.
// MixtralConfig (configuration_mixtral.py): the same attention, sliding_window defaulting to None. Phi3Config
// (configuration_phi3.py): sliding_window defaults to None, and Phi3Attention hands every layer's attention
// sliding_window=getattr(self.config, "sliding_window", None) (modeling_phi3.py); Phi-3-mini-4k names 2047.
void read_every_layer_window(const JsonObjectReader& config, DecoderArchitecture& arch, std::int64_t family_default) {
  arch.sliding_window = read_nullable_window(config, family_default);
}

// Qwen2Config (configuration_qwen2.py): sliding_window (default 4096) counts only with use_sliding_window (default
// false: `self.sliding_window = self.sliding_window if self.use_sliding_window else None`), and its default
// layer_types slide the layers from max_window_layers (default 28) on: "sliding_attention" if self.sliding_window is
// not None and i >= self.max_window_layers. Every released Qwen2 / Qwen2.5 config sets use_sliding_window false.
// Qwen3Config (configuration_qwen3.py) is the same, key for key and default for default (Qwen3-8B: false).
void read_qwen2_window(const JsonObjectReader& config, DecoderArchitecture& arch) {
  const bool use = config.boolean("use_sliding_window", false);
  const std::int64_t window = read_nullable_window(config, 4096);
  const std::int64_t first_sliding = config.optional_int_in_range("max_window_layers", 0, limits::kMaxLayers).value_or(28);
  read_sliding_layers(config, arch, use ? window : 0, [first_sliding](std::int64_t i) { return i >= first_sliding; });
}

// Qwen3MoeConfig (configuration_qwen3_moe.py): sliding_window (default 4096) counts only with use_sliding_window
// (default false), as Qwen2's, but it has no max_window_layers or layer_types: Qwen3MoeAttention gives every layer
// self.sliding_window = getattr(config, "sliding_window", None) (modeling_qwen3_moe.py).
void read_qwen3_moe_window(const JsonObjectReader& config, DecoderArchitecture& arch) {
  const bool use = config.boolean("use_sliding_window", false);
  const std::int64_t window = read_nullable_window(config, 4096);
  arch.sliding_window = use ? window : 0;
}

}  // namespace shardplan
