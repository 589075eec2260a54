// Field mapping of the Hugging Face Gemma 2 and Gemma 3 (text) configs onto the llama-family architecture.
#include "hf_arch.h"

#include <string>
#include <string_view>

namespace shardplan {

// Gemma2Config / Gemma3TextConfig (transformers/models/gemma2, gemma3): the llama keys (head_dim apart from hidden /
// heads, read by the caller) plus: four RMSNorms per layer (Gemma2DecoderLayer), final_logit_softcapping (Gemma 2:
// 30.0; Gemma 3: null). What shardplan does not model, and why it may: attn_logit_softcapping is a scalar tanh
// inside the attention kernel (flash-attn's softcap argument), no parameters and little work beside QKᵀ;
// sliding_window makes every other layer (Gemma 2) or five of six (Gemma 3) attend to a window only, which the
// attention FLOPs here count in full — an upper bound once sequences exceed the window; the embedding's scaling by
// √hidden is one multiply. The parameter count is exact. GeGLU (gelu_pytorch_tanh) replaces SiLU: the same tensors.
namespace {

// A key that may be null (transformers' "unset"), else a number in the range.
void check_nullable_number(const JsonObjectReader& config, std::string_view key, double least, double most) {
  if (config.has(key) && !config.raw().at(std::string(key)).is_null()) (void)config.number_in_range(key, least, most);
}

}  // namespace

void read_gemma(const JsonObjectReader& config, DecoderArchitecture& arch) {
  arch.sandwich_norms = true;
  // Read for their ranges only (see above): a malformed value is refused rather than ignored.
  check_nullable_number(config, "attn_logit_softcapping", 0.0, 1e6);
  check_nullable_number(config, "sliding_window", 1.0, 1e12);
  check_nullable_number(config, "query_pre_attn_scalar", 1e-6, 1e12);
  if (config.has("final_logit_softcapping") && !config.raw().at("final_logit_softcapping").is_null()) {
    arch.final_logit_softcap = config.non_negative_number("final_logit_softcapping", 0.0);
  }
}

}  // namespace shardplan
