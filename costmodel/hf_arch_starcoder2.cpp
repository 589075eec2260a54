// Field mapping of the Hugging Face StarCoder2 config (bigcode/starcoder2-3b, -7b, -15b) onto the llama block.
#include "hf_arch.h"

#include <string>

#include "input_limits.h"

namespace shardplan {

// Starcoder2Config (transformers/models/starcoder2/configuration_starcoder2.py) and modeling_starcoder2.py:
//   - the llama keys (vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
//     num_key_value_heads, max_position_embeddings) read by the caller; no tie_word_embeddings key of its own, so
//     PretrainedConfig's true (the 3B and 7B are tied, the 15B's config says false);
//   - use_bias (default true): Starcoder2Attention's q/k/v/o_proj and Starcoder2MLP's c_fc and c_proj take
//     bias=config.use_bias;
//   - Starcoder2DecoderLayer's input_layernorm and post_attention_layernorm and Starcoder2Model.norm are
//     nn.LayerNorm(hidden, eps=config.norm_epsilon): a weight and a bias whatever use_bias says;
//   - Starcoder2MLP: c_fc (hidden → intermediate), act (hidden_act: gelu_pytorch_tanh), c_proj, then
//     dropout(residual_dropout); Starcoder2Attention drops its output at residual_dropout and its scores at
//     attention_dropout; Starcoder2Model drops the embedding at embedding_dropout (0.1 each in the 3B and 7B
//     configs, 0.0 in the 15B's). shardplan models one rate (DecoderArchitecture::dropout), so the three must agree;
//   - sliding_window (4096 in every release): every layer attends to the last 4096 positions (Note [Sliding-window
//     attention] in kernel_spec.h).
void read_starcoder2(const JsonObjectReader& config, DecoderArchitecture& arch) {
  const bool bias = config.boolean("use_bias", true);
  arch.attention_bias = bias;
  arch.o_proj_bias = bias;
  arch.mlp_bias = bias;
  arch.layer_norm = true;
  arch.gated_mlp = false;
  arch.naming = DecoderArchitecture::Naming::starcoder2;
  if (config.has("sliding_window") && !config.raw().at("sliding_window").is_null()) {
    arch.sliding_window = config.int_in_range("sliding_window", 1, limits::kMaxPositions);
  }
  const double residual = config.non_negative_number("residual_dropout", 0.0);
  if (residual >= 1.0) config.fail("residual_dropout", "a dropout probability in [0, 1)");
  for (const char* key : {"attention_dropout", "embedding_dropout"}) {
    if (config.non_negative_number(key, 0.0) != residual) {
      config.fail(key, "residual_dropout's rate (shardplan models one dropout rate for the whole model)");
    }
  }
  arch.dropout = residual;
  // Read for their ranges only (no tensor changes): the GELU variants the kernels count as one GELU, the epsilon.
  if (config.has("hidden_act")) {
    const std::string act = config.string("hidden_act");
    if (act != "gelu_pytorch_tanh" && act != "gelu" && act != "gelu_new" && act != "gelu_fast") {
      config.fail("hidden_act", "a GELU ('gelu_pytorch_tanh', 'gelu', 'gelu_new' or 'gelu_fast')");
    }
  }
  if (config.has("norm_epsilon")) (void)config.number_in_range("norm_epsilon", 0.0, 1.0);
}

}  // namespace shardplan
