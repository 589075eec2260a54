// BlockNames: the module paths of a llama-family decoder's layers and block modules, per reference implementation.
#pragma once

#include <string>

#include "model_spec.h"

namespace shardplan {

// Note [Block naming]: the llama-family builder lays out one block shape (norms, attention, MLP) for architectures
// whose modules are named differently; the names follow each reference implementation's state dict, so exports,
// LoRA targets and checkpoints see the real paths. Attention projections are short names (the kernels' projection
// names), completed with `attention` (the attention module) in the tensor names.
struct BlockNames {
  std::string embedding, layers, final_norm, head;  // model-level module paths ("model.layers." + index)
  std::string input_norm, post_attention_norm;      // the block's two norms (sequential blocks)
  std::string attention;                            // "self_attn"
  std::string q, k, v, qkv, o;                      // projections, under `attention`
  std::string mlp;                                  // "mlp"
  std::string gate, up, down, gate_up;              // MLP projections, under `mlp` (up/down: a non-gated MLP's too)
};

inline BlockNames block_names(const DecoderArchitecture& arch) {
  BlockNames names{"model.embed_tokens", "model.layers.", "model.norm", "lm_head", "input_layernorm",
                   "post_attention_layernorm", "self_attn", "q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "mlp",
                   "gate_proj", "up_proj", "down_proj", "gate_up_proj"};
  switch (arch.naming) {
    case DecoderArchitecture::Naming::llama: break;
    // Starcoder2MLP: c_fc (hidden → intermediate) and c_proj (back); attention and norms are llama's.
    case DecoderArchitecture::Naming::starcoder2:
      names.up = "c_fc";
      names.down = "c_proj";
      break;
    // FalconModel: transformer.word_embeddings, transformer.h.N (input_layernorm, or ln_attn and ln_mlp),
    // self_attention.query_key_value and .dense, mlp.dense_h_to_4h and .dense_4h_to_h; transformer.ln_f; lm_head.
    case DecoderArchitecture::Naming::falcon:
      names = {"transformer.word_embeddings", "transformer.h.", "transformer.ln_f", "lm_head", "input_layernorm",
               "post_attention_layernorm", "self_attention", "", "", "", "query_key_value", "dense", "mlp", "",
               "dense_h_to_4h", "dense_4h_to_h", ""};
      break;
    // InternLM2Model (internlm/internlm2-*: modeling_internlm2.py): model.tok_embeddings, model.layers.N
    // (attention_norm, attention.wqkv, attention.wo, ffn_norm, feed_forward.w1 (gate), w3 (up), w2 (down)), model.norm,
    // output.
    case DecoderArchitecture::Naming::internlm2:
      names = {"model.tok_embeddings", "model.layers.", "model.norm", "output", "attention_norm", "ffn_norm",
               "attention", "", "", "", "wqkv", "wo", "feed_forward", "w1", "w3", "w2", ""};
      break;
  }
  return names;
}

}  // namespace shardplan
