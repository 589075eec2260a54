// Field mapping of the Hugging Face GPT-NeoX config (EleutherAI Pythia, gpt-neox-20b) onto DecoderArchitecture.
#include "hf_arch.h"

#include <string>

#include "input_limits.h"

namespace shardplan {

// GPTNeoXConfig (transformers/models/gpt_neox/configuration_gpt_neox.py): vocab_size, hidden_size,
// num_hidden_layers, num_attention_heads, intermediate_size (the MLP's width, 4h in the released models),
// rotary_pct (default 0.25), use_parallel_residual (default true), attention_bias (default true: biases on
// query_key_value and dense), tie_word_embeddings (default false: embed_out apart from embed_in),
// attention_dropout and hidden_dropout (0 in every released config; a non-zero one is refused, not modelled).
DecoderArchitecture gpt_neox_architecture(const JsonObjectReader& config) {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::gpt_neox;
  arch.vocab_size = config.int_in_range("vocab_size", 1, limits::kMaxVocabSize);
  arch.hidden_size = config.int_in_range("hidden_size", 1, limits::kMaxHiddenSize);
  arch.num_layers = config.int_in_range("num_hidden_layers", 1, limits::kMaxLayers);
  arch.num_heads = config.int_in_range("num_attention_heads", 1, limits::kMaxHeads);
  arch.num_kv_heads = arch.num_heads;  // GPTNeoXAttention is plain multi-head attention
  arch.intermediate_size = config.int_in_range("intermediate_size", 1, limits::kMaxIntermediateSize);
  // GPTNeoXConfig default 2048; it bounds the sequence length only.
  arch.max_position_embeddings =
      config.optional_int_in_range("max_position_embeddings", 1, limits::kMaxPositions).value_or(2048);
  arch.tie_word_embeddings = config.boolean("tie_word_embeddings", false);
  arch.attention_bias = config.boolean("attention_bias", true);
  arch.parallel_residual = config.boolean("use_parallel_residual", true);
  const double rotary = config.non_negative_number("rotary_pct", 0.25);
  if (!(rotary > 0.0 && rotary <= 1.0)) config.fail("rotary_pct", "a share of the head dims in (0, 1]");
  arch.rotary_fraction = rotary;
  for (const char* key : {"attention_dropout", "hidden_dropout"}) {
    if (config.non_negative_number(key, 0.0) != 0.0) config.fail(key, "0 (dropout in GPT-NeoX is not supported)");
  }
  arch.dropout = 0.0;
  // Read for their ranges only (no parameter count changes), so a malformed value is refused rather than ignored:
  // the GeLU variants the kernels count as one GeLU (GPTNeoXMLP's act: "gelu" in Pythia, "gelu_fast" in
  // gpt-neox-20b), the RoPE base, the LayerNorms' epsilon.
  if (config.has("hidden_act")) {
    const std::string act = config.string("hidden_act");
    if (act != "gelu" && act != "gelu_fast" && act != "gelu_new") {
      config.fail("hidden_act", "'gelu', 'gelu_fast' or 'gelu_new'");
    }
  }
  if (config.has("rotary_emb_base")) (void)config.number_in_range("rotary_emb_base", 1e-6, 1e12);
  if (config.has("layer_norm_eps")) (void)config.number_in_range("layer_norm_eps", 0.0, 1.0);
  return arch;
}

}  // namespace shardplan
