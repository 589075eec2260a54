// Field mapping of the Hugging Face Falcon config (tiiuae/falcon-7b, -40b, -180B; Falcon2-11B) onto the llama block.
#include "hf_arch.h"

#include <string>

#include "input_limits.h"

namespace shardplan {

// FalconConfig (transformers/models/falcon/configuration_falcon.py) and modeling_falcon.py:
//   - vocab_size, hidden_size, num_hidden_layers, num_attention_heads; head_dim = hidden_size / num_attention_heads
//     (FalconAttention: self.head_dim = hidden_size // num_heads); ffn_hidden_size (None: 4 · hidden_size);
//     max_position_embeddings (default 2048); tie_word_embeddings (PretrainedConfig's true: the released 7B, 40B
//     and 180B configs omit it and their lm_head is word_embeddings').
//   - FalconAttention.query_key_value = FalconLinear(hidden, out, bias=config.bias): out = (num_kv_heads · 2 +
//     num_heads) · head_dim with new_decoder_architecture (grouped heads, num_kv_heads), hidden + 2 · head_dim with
//     multi_query (one shared k and v head), else 3 · hidden (multi-head, whatever num_kv_heads says). dense = FalconLinear(hidden, hidden, bias=config.bias).
//   - FalconMLP: dense_h_to_4h (hidden → ffn_hidden_size), activation (gelu), dense_4h_to_h; bias=config.bias.
//   - FalconDecoderLayer: without parallel_attn, input_layernorm and post_attention_layernorm (sequential);
//     with it, ln_attn and ln_mlp when num_ln_in_parallel_attn is 2 (its default under new_decoder_architecture:
//     Falcon-40B, -180B), else one input_layernorm feeding both branches (Falcon-7B; Falcon2-11B sets 1); the output
//     is x + attention + mlp. Every norm is nn.LayerNorm (weight and bias), transformer.ln_f too.
//   - alibi: ALiBi position biases in place of rotary embeddings (Falcon-RW): no tensor, but an attention-bias term
//     the attention kernels here do not price, so refused.
DecoderArchitecture falcon_architecture(const JsonObjectReader& config) {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::llama;
  arch.naming = DecoderArchitecture::Naming::falcon;
  arch.vocab_size = config.int_in_range("vocab_size", 1, limits::kMaxVocabSize);
  arch.hidden_size = config.int_in_range("hidden_size", 1, limits::kMaxHiddenSize);
  arch.num_layers = config.int_in_range("num_hidden_layers", 1, limits::kMaxLayers);
  arch.num_heads = config.int_in_range("num_attention_heads", 1, limits::kMaxHeads);
  arch.max_position_embeddings =
      config.optional_int_in_range("max_position_embeddings", 1, limits::kMaxPositions).value_or(2048);
  arch.intermediate_size = 4 * arch.hidden_size;
  if (config.has("ffn_hidden_size") && !config.raw().at("ffn_hidden_size").is_null()) {
    arch.intermediate_size = config.int_in_range("ffn_hidden_size", 1, limits::kMaxIntermediateSize);
  }
  if (config.boolean("alibi", false)) {
    config.fail("alibi", "false (ALiBi attention biases are not modelled; Falcon with rotary embeddings is)");
  }
  const bool new_architecture = config.boolean("new_decoder_architecture", false);
  const bool multi_query = config.boolean("multi_query", true);
  const bool parallel = config.boolean("parallel_attn", true);
  std::int64_t kv_heads = arch.num_heads;
  if (config.has("num_kv_heads") && !config.raw().at("num_kv_heads").is_null()) {
    kv_heads = config.int_in_range("num_kv_heads", 1, arch.num_heads);
  }
  // The width of query_key_value follows num_kv_heads only under new_decoder_architecture: otherwise 3 · hidden
  // (multi-head) or hidden + 2 · head_dim (multi-query), whatever num_kv_heads says.
  arch.num_kv_heads = new_architecture ? kv_heads : multi_query ? 1 : arch.num_heads;
  arch.fused_qkv = true;
  const bool bias = config.boolean("bias", false);
  arch.attention_bias = bias;
  arch.o_proj_bias = bias;
  arch.mlp_bias = bias;
  arch.layer_norm = true;
  arch.gated_mlp = false;
  arch.tie_word_embeddings = config.boolean("tie_word_embeddings", true);
  if (new_architecture && !parallel) {
    config.fail("parallel_attn", "true with new_decoder_architecture (its sequential form is not modelled)");
  }
  arch.parallel_residual = parallel;
  if (parallel) {
    arch.parallel_norms = new_architecture ? 2 : 1;
    if (config.has("num_ln_in_parallel_attn") && !config.raw().at("num_ln_in_parallel_attn").is_null()) {
      arch.parallel_norms = config.int_in_range("num_ln_in_parallel_attn", 1, 2);
      if (arch.parallel_norms == 2 && !new_architecture) {
        config.fail("num_ln_in_parallel_attn", "1 without new_decoder_architecture (FalconDecoderLayer then runs "
                                               "input_layernorm only)");
      }
    }
  }
  // Read for their ranges only (no tensor changes, dropout refused as GPT-NeoX's is).
  for (const char* key : {"attention_dropout", "hidden_dropout"}) {
    if (config.non_negative_number(key, 0.0) != 0.0) config.fail(key, "0 (dropout in Falcon is not supported)");
  }
  if (config.has("activation")) {
    const std::string act = config.string("activation");
    if (act != "gelu") config.fail("activation", "'gelu'");
  }
  if (config.has("layer_norm_epsilon")) (void)config.number_in_range("layer_norm_epsilon", 0.0, 1.0);
  return arch;
}

}  // namespace shardplan
