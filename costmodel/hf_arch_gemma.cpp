// Field mapping of the Hugging Face Gemma 2 and Gemma 3 (text) configs onto the llama-family architecture.
#include "hf_arch.h"

#include <string>
#include <string_view>

namespace shardplan {

// Gemma2Config / Gemma3TextConfig (transformers/models/gemma2, gemma3): the llama keys (head_dim apart from hidden /
// heads, read by the caller) plus: four RMSNorms per layer (Gemma2DecoderLayer), final_logit_softcapping (Gemma 2:
// 30.0; Gemma 3: null), and local layers (Note [Sliding-window attention]): a layer whose layer_types entry is
// "sliding_attention" attends to the last sliding_window positions (Gemma2Attention / Gemma3Attention:
// self.sliding_window = config.sliding_window if self.is_sliding else None). Without a layer_types list, Gemma 2
// slides the even layers (configuration_gemma2.py: "sliding_attention" if bool((i + 1) % 2); older modeling_gemma2.py:
// is_sliding = not bool(layer_idx % 2)) and Gemma 3 every layer but each sliding_window_pattern-th (default 6:
// bool((layer_idx + 1) % config.sliding_window_pattern), five local to one global). sliding_window defaults to 4096
// in both config classes (gemma-2-2b: 4096; gemma-3-1b: 512; gemma-3-4b and up: 1024). What shardplan does not
// model, and why it may: attn_logit_softcapping is a scalar tanh inside the attention kernel (flash-attn's softcap
// argument), no parameters and little work beside QKᵀ; the embedding's scaling by √hidden is one multiply. The
// parameter count is exact. GeGLU (gelu_pytorch_tanh) replaces SiLU: the same tensors.
namespace {

// A key that may be null (transformers' "unset"), else a number in the range.
void check_nullable_number(const JsonObjectReader& config, std::string_view key, double least, double most) {
  if (config.has(key) && !config.raw().at(std::string(key)).is_null()) (void)config.number_in_range(key, least, most);
}

}  // namespace

void read_gemma(const JsonObjectReader& config, DecoderArchitecture& arch, bool gemma3) {
  arch.sandwich_norms = true;
  // Read for their ranges only (see above): a malformed value is refused rather than ignored.
  check_nullable_number(config, "attn_logit_softcapping", 0.0, 1e6);
  check_nullable_number(config, "query_pre_attn_scalar", 1e-6, 1e12);
  if (config.has("final_logit_softcapping") && !config.raw().at("final_logit_softcapping").is_null()) {
    arch.final_logit_softcap = config.non_negative_number("final_logit_softcapping", 0.0);
  }
  const std::int64_t window = read_nullable_window(config, 4096);
  const std::int64_t pattern =
      gemma3 ? config.optional_int_in_range("sliding_window_pattern", 1, arch.num_layers + 1).value_or(6) : 2;
  read_sliding_layers(config, arch, window, [pattern](std::int64_t i) { return (i + 1) % pattern != 0; });
}

}  // namespace shardplan
