// ModelSpec: an ordered list of layers with parameter tensors, FLOPs per token and activation footprint per token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "finetune.h"
#include "kernel_spec.h"
#include "mla_architecture.h"
#include "moe_architecture.h"

namespace shardplan {

enum class LayerKind { embedding, transformer_block, norm, lm_head, other };
const char* to_string(LayerKind kind);
LayerKind layer_kind_from_string(const std::string& text);  // throws InputError naming the known kinds

// Activation checkpointing of a transformer block, as PyTorch users apply it: none keeps every tensor backward needs;
// selective is Korthikanti et al. 2022's attention-core recompute ("Reducing Activation Recomputation in Large
// Transformer Models", §5: drops the s² terms, nearly a no-op with flash kernels); full keeps only the block input and
// recomputes the rest during backward (§4; HF gradient checkpointing, checkpoint_wrapper); selective_op is torchtitan's
// op-level policy (Note [Selective-op checkpointing] in pass_kernels.h).
enum class ActivationCheckpointing { none, selective, full, selective_op };
inline constexpr int kCheckpointingModes = 4;
const char* to_string(ActivationCheckpointing mode);

struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t element_count() const;
  bool operator==(const TensorSpec&) const = default;
};

// Forward FLOPs of one token of one sequence: matmul_flops_per_token + attention_flops_per_token_per_position × s.
// Backward is 2× forward (Narayanan et al. 2021, §5.1); recompute adds one forward.
struct LayerFlops {
  double matmul_flops_per_token = 0;  // 2·n·k per weight matrix of shape n×k (one multiply-add = 2 FLOPs)
  // Q·Kᵀ and P·V each cost 2·s·(heads·head_dim) per token without causal skipping (DESIGN: attention 4·b·s²·h).
  double attention_flops_per_token_per_position = 0;
  // The forward FLOPs of frozen weights (fine-tuning): their backward computes the input gradient only, so the
  // backward's model FLOPs are 2× forward less these (DESIGN: "backward = 2× forward (1× for frozen weights)").
  double frozen_weight_flops_per_token = 0;
  // Whether the layer's attention is causal, so a kernel that exploits the mask skips half of it (decoders); false
  // for encoders (ViT, CLIP and SigLIP vision towers, BERT), whose every query attends to every key.
  bool causal_attention = true;
  // Note [Sliding-window attention] (kernel_spec.h): each query attends to the last `attention_window` positions;
  // 0: every earlier position.
  std::int64_t attention_window = 0;
  bool attention_chunked = false;  // Note [Chunked attention]: attention_window is a chunk each query attends within
  bool operator==(const LayerFlops&) const = default;
};

// What the layer keeps for backward, per token of a micro-batch, generalising Korthikanti et al. 2022 Table/Eq. (1):
// for a GPT block with 16-bit activations these terms sum to exactly s·b·h·(34 + 5·a·s/h) bytes per layer.
struct ActivationFootprint {
  double elements_per_token = 0;          // tensors kept in the activation dtype (2 bytes in bf16, 4 in fp32)
  double mask_bytes_per_token = 0;        // dropout masks, 1 byte per element
  double score_elements_per_token_per_position = 0;  // softmax output (and dropout output): × s, absent with flash
  double score_mask_bytes_per_token_per_position = 0;  // attention-dropout mask: × s, absent with flash
  double flash_stat_bytes_per_token = 0;  // flash attention keeps an fp32 log-sum-exp per head instead of the scores
  double fp32_bytes_per_token = 0;        // an extra fp32 copy kept when activations are narrower (logits upcast for
                                          // the loss); absent in fp32 training, where the tensor already is fp32
  double checkpoint_elements_per_token = 0;  // what full recompute keeps: the block input (2sbh bytes in bf16)
  // What torchtitan's selective-op policy keeps (activation-dtype elements; flash_stat_bytes_per_token on top): the
  // block input, every other matmul's output and attention's output (block_kernels.h selective_op_kept_elements).
  double selective_op_elements_per_token = 0;
  // Under torch.compile (TrainingConfig::torch_compile), what the compiled block does not keep of the two above
  // (Note [Compiled blocks] in compiled_block.h); 0 for blocks modelled eager only.
  double compiled_recomputed_elements_per_token = 0;
  double compiled_unread_selective_op_elements_per_token = 0;
  // Working memory alive only while the layer's forward or backward op runs (Note [Workspaces] in unit_layout.h):
  // fp32 elements when activations are narrower than fp32 (the loss's upcast of the logits beside log_softmax's
  // output), and in backward fp32 gradients plus their cast to the activation dtype (the logits' gradient).
  double forward_workspace_fp32_per_token = 0;
  double backward_workspace_fp32_per_token = 0;
  double backward_workspace_elements_per_token = 0;
  // Forward working memory in the activation dtype whatever it is (Liger's fused linear cross-entropy: one chunk of
  // logits, Note [Fine-tuning losses] in loss.h).
  double forward_workspace_elements_per_token = 0;
  // The fp32 copy above is this many tensors of equal size (torchtune's chunked output loss keeps one per chunk): the
  // largest single tensor is fp32_bytes_per_token / fp32_tensor_count.
  int fp32_tensor_count = 1;
  // Note [Eager composite activations]: what eager PyTorch's autograd keeps beyond the fields above when the layer
  // runs as Hugging Face's attn_implementation="eager" code (AttentionActivations::eager_composite), op by op as
  // tools/autograd/derivatives.yaml says each op saves; absent (0) for layers whose kept tensors are measured whole
  // (model files) or whose eager code keeps nothing more. decoder_builder.cpp (llama_block) says which tensors.
  double eager_norm_elements_per_token = 0;       // activation dtype: each RMSNorm's x·rsqrt (its weight's gradient)
  double eager_norm_fp32_elements_per_token = 0;  // fp32 whatever the activation dtype: each RMSNorm's rsqrt per row
  // Of elements_per_token, the tensors eager keeps in fp32 whatever the activation dtype (each RMSNorm's input,
  // upcast by x.to(float32) before pow saves it): they cost 4 bytes, not the activation dtype's.
  double eager_upcast_elements_per_token = 0;
  double eager_attention_elements_per_token = 0;  // activation dtype: repeat_kv's k and v beyond the kv heads
  // × s: the softmax's fp32 output when activations are narrower than fp32 (softmax(dtype=float32) keeps it, and the
  // P·V matmul keeps its cast back, the score elements above); in fp32 the two are one tensor.
  double eager_score_fp32_elements_per_token_per_position = 0;
  bool operator==(const ActivationFootprint&) const = default;
};

// What a transformer block keeps of its attention core, by how attention runs: a fused kernel (FlashAttention, SDPA's
// flash/efficient kernels: no scores, a log-sum-exp per head); the scores materialised by kernels that keep exactly
// the tensors ActivationFootprint's plain fields list (shardplan's CPU and GPU runtimes, --no-flash-attention); or
// eager PyTorch's composite ops, which keep what autograd saves for each op (Note [Eager composite activations]).
enum class AttentionActivations { flash, materialised, eager_composite };

// A layer's parameters under a fine-tuning config (finetune_apply.h), in elements: what trains (its base tensors left
// trainable and its LoRA adapters), what is frozen in full precision, what is frozen and stored 4-bit (QLoRA).
struct LayerFinetune {
  std::int64_t trainable_elements = 0;
  std::int64_t frozen_elements = 0;
  std::int64_t quantized_elements = 0;
  std::int64_t adapter_elements = 0;       // of trainable_elements: LoRA's A (r × in) and B (out × r)
  std::int64_t packed_bytes = 0;           // the quantised weights' 4-bit codes, two to a byte
  std::int64_t quant_constant_bytes = 0;   // their quantisation constants (Note [Quantisation constants])
  std::int64_t largest_quantized_weight = 0;  // elements of the largest, dequantised for its GEMMs one at a time
  // false: no parameter at or before this layer trains, so autograd records nothing here — the layer keeps no
  // activations and its backward runs no kernel (the embedding under LoRA).
  bool backward_needed = true;
  bool operator==(const LayerFinetune&) const = default;
};

struct LayerSpec {
  std::string name;  // the module path in the reference implementation ("model.layers.3"), used by exports
  LayerKind kind = LayerKind::other;
  std::vector<TensorSpec> tensors;
  // A layer whose weight is another layer's (tied lm_head): it owns no tensors and must share that layer's unit.
  std::optional<std::size_t> tied_to_layer;
  LayerFlops flops;
  ActivationFootprint activations;
  // The kernels its forward launches (the op-level compute model, pass_kernels.h); absent for layers of explicit model
  // files, which get kernels derived from their FLOPs and activation sizes.
  std::optional<LayerKernelSpec> kernels;
  // Set by finetuned_model (finetune_apply.h) for every layer when the model trains less than all its parameters;
  // absent: every parameter trains.
  std::optional<LayerFinetune> finetune;
  // A block whose MLP is a mixture of experts: its routing, for expert parallelism (Note [Expert parallelism] in
  // planner/unit_layout.h) and the all-to-alls the lowering emits.
  std::optional<MoeLayerRouting> moe;
  // Note [Tokens per sample]: the tokens one training sample puts through this layer when the model fixes that count
  // rather than --seq-len does — a multimodal model's vision tower runs on its image's patches (577 per image for
  // CLIP ViT-L/14 at 336 px, class token included) while its decoder runs on the training sequence. Absent: the
  // training sequence. Read only through tokens_per_sample() and TrainingConfig::tokens_per_micro_batch(layer).
  std::optional<std::int64_t> fixed_tokens_per_sample;

  std::int64_t param_count() const;
  // Note [Tokens per sample]: the layer's own count where fixed, else the training sequence length `seq_len`. It is
  // also the number of positions the layer's attention spans (each sample's tokens attend among themselves).
  std::int64_t tokens_per_sample(std::int64_t seq_len) const { return fixed_tokens_per_sample.value_or(seq_len); }
  // Per token of this layer, at training sequence length `seq_len` (the attention spans tokens_per_sample(seq_len)
  // positions). causal_skip: the attention kernel skips masked work (flash); it applies only where the layer is causal.
  double forward_flops_per_token(std::int64_t seq_len, bool causal_skip) const;
  // Backward's model FLOPs: 2× forward, less the weight gradients frozen weights skip; none where autograd runs no
  // backward (LayerFinetune::backward_needed).
  double backward_flops_per_token(std::int64_t seq_len, bool causal_skip) const;
  // Bytes kept for backward per token of this layer under the given checkpointing (only transformer blocks are
  // checkpointed); the s² terms span tokens_per_sample(seq_len) positions. `torch_compile`: the block runs compiled
  // (Note [Compiled blocks]).
  double activation_bytes_per_token(std::int64_t seq_len, int activation_element_bytes, AttentionActivations attention,
                                    ActivationCheckpointing checkpointing, bool torch_compile = false) const;
  // flash_attention: flash, else materialised (the runtimes' and the tests' shorthand).
  double activation_bytes_per_token(std::int64_t seq_len, int activation_element_bytes, bool flash_attention,
                                    ActivationCheckpointing checkpointing, bool torch_compile = false) const {
    return activation_bytes_per_token(
        seq_len, activation_element_bytes,
        flash_attention ? AttentionActivations::flash : AttentionActivations::materialised, checkpointing,
        torch_compile);
  }
  // The workspaces per token (ActivationFootprint): forward's upcast exists only when activations are narrower than
  // fp32, as does backward's cast of its fp32 gradient.
  double forward_workspace_bytes_per_token(int activation_element_bytes) const;
  double backward_workspace_bytes_per_token(int activation_element_bytes) const;
  // Note [Allocator size classes] (planner/caching_allocator.h): the bytes per token of the largest single tensor the
  // layer's passes allocate — a GEMM's input or output at its widest, the attention scores where they are
  // materialised, the loss's fp32 logits; 0 where the layer has no kernel description (explicit model files).
  double largest_tensor_bytes_per_token(std::int64_t seq_len, int activation_element_bytes,
                                        AttentionActivations attention) const;
  bool operator==(const LayerSpec&) const = default;
};

// The architecture a model was built from, kept for the executor (which builds real layers) and for exports.
struct DecoderArchitecture {
  enum class Family { llama, gpt2, gpt_neox };  // gpt_neox: GPTNeoXForCausalLM (Pythia, gpt-neox-20b)
  Family family = Family::llama;
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;            // grouped-query attention; == num_heads for plain multi-head attention
  std::int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;              // Qwen2 puts biases on q, k and v
  // A bias on o_proj too: transformers' LlamaAttention, Qwen3Attention and Gemma2/3Attention build o_proj with
  // bias=config.attention_bias (Qwen2Attention hard-codes it off), so a Llama config with attention_bias: true has it.
  bool o_proj_bias = false;
  // Biases on gate_proj, up_proj and down_proj (LlamaMLP and GraniteMLP: bias=config.mlp_bias; Granite Code).
  bool mlp_bias = false;
  double dropout = 0.0;                     // GPT-2's resid/attn/embd dropout; llama has none
  // A mixture-of-experts MLP in place of the dense one (Mixtral, Qwen2/3-MoE); intermediate_size is then the dense
  // MLP's width where the architecture has dense layers too.
  std::optional<MoeArchitecture> moe;
  // A head dimension given apart from hidden_size / num_heads (Qwen3, Gemma, Mistral-Nemo: config "head_dim");
  // 0: hidden_size / num_heads.
  std::int64_t explicit_head_dim = 0;
  bool qk_norm = false;                     // Qwen3: RMSNorm over each head of q and k before RoPE (q_norm, k_norm)
  // OLMo 2: q_norm and k_norm span every head at once (Olmo2Attention: RMSNorm(heads·head_dim), RMSNorm(kv_heads·
  // head_dim)) rather than one head_dim shared by the heads; with qk_norm.
  bool qk_norm_full_width = false;
  // OLMo 2: no norm before attention or the MLP, one after each (Olmo2DecoderLayer: post_attention_layernorm,
  // post_feedforward_layernorm applied to the branch before the residual add).
  bool post_norms = false;
  // Phi-3: q, k and v in one qkv_proj, gate and up in one gate_up_proj (Phi3Attention, Phi3MLP): the same weights
  // and work, fewer GEMMs.
  bool fused_projections = false;
  // Gemma 2/3: a norm after attention and around the MLP (Gemma2DecoderLayer: post_attention_layernorm,
  // pre_feedforward_layernorm, post_feedforward_layernorm) and the logits soft-capped, cap · tanh(logits / cap)
  // (final_logit_softcapping; 0: none).
  bool sandwich_norms = false;
  double final_logit_softcap = 0.0;
  // DeepSeek-V2/V3: Multi-head Latent Attention in place of q/k/v projections (mla_architecture.h); the attention
  // width is then num_heads × the MLA head dims, not head_dim().
  std::optional<MlaArchitecture> mla;
  // GPT-NeoX: the share of each head's dims rotary embeddings cover (config rotary_pct; 1: all, as in llama) and
  // attention and MLP computed in parallel from the same input (use_parallel_residual).
  double rotary_fraction = 1.0;
  bool parallel_residual = false;
  // Phi-3.5-MoE: nn.LayerNorm (weight and bias) wherever llama has an RMSNorm, the final norm included
  // (PhimoeDecoderLayer: input_layernorm, post_attention_layernorm; PhimoeModel.norm).
  bool layer_norm = false;
  bool lm_head_bias = false;  // PhimoeForCausalLM: lm_head = nn.Linear(hidden, vocab, bias=config.lm_head_bias)
  // Cohere: CohereLayerNorm has a weight and no bias (LayerNorm's mean and variance, bias=False); with layer_norm.
  bool layer_norm_bias = true;
  // false: a two-matrix MLP, up (c_fc / dense_h_to_4h) → GELU → down (c_proj / dense_4h_to_h), in place of SwiGLU's
  // gate, up and down (Starcoder2MLP, FalconMLP).
  bool gated_mlp = true;
  // With parallel_residual in the llama family: how many norms feed the two branches (CohereDecoderLayer and Falcon's
  // parallel_attn: one input_layernorm; Falcon's new_decoder_architecture: ln_attn and ln_mlp).
  std::int64_t parallel_norms = 1;
  // q, k and v in one projection while the MLP stays unfused (Falcon's query_key_value, InternLM2's wqkv).
  bool fused_qkv = false;
  // Module names where they differ from llama's (Note [Block naming] in decoder_builder.cpp).
  enum class Naming { llama, starcoder2, falcon, internlm2 };
  Naming naming = Naming::llama;
  // Note [Sliding-window attention]: layers whose queries attend to the last `sliding_window` positions only (0:
  // none). sliding_layers[i]: whether layer i slides, one entry per layer, as transformers' layer_types lists them
  // ("sliding_attention" / "full_attention": gpt-oss and Gemma 2 alternate, Gemma 3 slides five of six, Qwen2 and
  // Qwen3 from max_window_layers on); empty: every layer slides (StarCoder2, Mistral, Phi-3, Qwen3-MoE).
  std::int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  bool is_sliding_layer(std::int64_t index) const {
    return sliding_window > 0 &&
           (sliding_layers.empty() ||
            (static_cast<std::size_t>(index) < sliding_layers.size() && sliding_layers[static_cast<std::size_t>(index)]));
  }
  // gpt-oss: one learned logit per query head per layer (self_attn.sinks) joins each softmax's denominator.
  bool attention_sinks = false;
  // Cohere: q_norm and k_norm are LayerNorms with a weight per head (CohereLayerNorm((heads, head_dim))): heads ×
  // head_dim and kv_heads × head_dim elements, with qk_norm.
  bool qk_norm_per_head_weights = false;
  // Note [Long context]: the longest sequence the config's RoPE scaling names (rope_scaling / rope_parameters: factor
  // × original_max_position_embeddings); 0: none. --seq-len may reach it beyond max_position_embeddings.
  std::int64_t rope_scaled_positions = 0;
  std::int64_t max_trainable_positions() const {
    return rope_scaled_positions > max_position_embeddings ? rope_scaled_positions : max_position_embeddings;
  }
  std::int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_heads; }
  std::int64_t q_dim() const { return head_dim() * num_heads; }  // q_proj's output width, o_proj's input
  std::int64_t kv_dim() const { return head_dim() * num_kv_heads; }
};
const char* to_string(DecoderArchitecture::Family family);

struct ModelSpec {
  std::string name;
  std::vector<LayerSpec> layers;
  std::int64_t hidden_size = 0;
  std::int64_t vocab_size = 0;
  std::int64_t num_heads = 0;
  std::int64_t default_seq_len = 2048;
  std::optional<DecoderArchitecture> architecture;  // absent for models given as an explicit layer list
  // Note [Long context]: the longest --seq-len a model without an architecture trains at, kept from the decoder it
  // was built from when a splice or a rename drops the architecture (Gemma 3 multimodal, Qwen2-VL, LLaVA, Llama 4)
  // and written with the model (model_json.h); 0: unchecked (hand-written layer lists).
  std::int64_t max_positions = 0;
  // The fine-tuning its layers' LayerFinetune were resolved for (finetuned_model); a plan lowers only against the
  // model resolved for its own TrainingConfig::finetune (validate_plan).
  FinetuneConfig finetune;

  std::int64_t param_count() const;
  std::size_t block_count() const;  // transformer blocks
  // The architecture's reach where there is one, else max_positions (0: unchecked).
  std::int64_t max_trainable_positions() const {
    return architecture ? architecture->max_trainable_positions() : max_positions;
  }
  // Model FLOPs of the forward pass per token of the training sequence at this length (no recompute): the MFU
  // numerator / 3. A layer with its own token count (Note [Tokens per sample]) adds its work per sample over seq_len.
  double forward_flops_per_token(std::int64_t seq_len, bool causal_skip) const;
};

// Checks the invariants every ModelSpec must satisfy whatever built it: at least one layer, positive shapes, tied
// layers pointing at an earlier layer with tensors. Throws InputError naming `origin` and the layer.
void validate_model(const ModelSpec& model, const std::string& origin);

}  // namespace shardplan
