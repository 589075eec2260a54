// The LayerKernel driver: input checks, checkpointing (Note [Kernel driver]) and the model-level dimension checks.
#include "layer_kernel.h"

#include <algorithm>

#include "errors.h"

namespace shardplan::runtime {

DecoderDims decoder_dims(const ModelSpec& model) {
  const std::string origin = "model '" + model.name + "'";
  if (!model.architecture) {
    // Models built from a Hugging Face config keep no architecture when their layers are not one decoder's: a
    // vision tower spliced before the decoder (vision_splice.h) or Llama 4's renamed MoE blocks. Say which.
    const auto any = [&](auto has) { return std::any_of(model.layers.begin(), model.layers.end(), has); };
    if (any([](const LayerSpec& layer) { return layer.fixed_tokens_per_sample.has_value(); })) {
      throw InputError(origin + ": vision towers (LLaVA, Qwen2-VL / Qwen2.5-VL, Gemma 3 multimodal, Llama 4) are not "
                       "supported by the runtime yet");
    }
    if (any([](const LayerSpec& layer) { return layer.moe.has_value(); })) {
      throw InputError(origin + ": mixture-of-experts blocks (Llama 4 and its chunked attention) are not supported by "
                       "the runtime yet");
    }
    throw InputError(origin + ": the CPU runtime needs a decoder architecture (a preset or a Hugging Face config), "
                     "not an explicit layer list");
  }
  const DecoderArchitecture& arch = *model.architecture;
  if (arch.family != DecoderArchitecture::Family::llama) {
    throw InputError(origin + ": family '" + to_string(arch.family) + "' is not supported by the CPU runtime; "
                     "expected 'llama'");
  }
  if (arch.dropout != 0.0) throw InputError(origin + ": the CPU runtime implements no dropout; expected dropout 0");
  const FinetuneConfig& finetune = model.finetune;
  if (finetune.mode == FinetuneMode::qlora) {
    throw InputError(origin + ": fine-tuning 'qlora' stores base weights 4-bit, which the CPU runtime does not "
                     "execute; expected --finetune lora (the same adapters over fp32 base weights), frozen or full");
  }
  if (finetune.uses_lora() && finetune.lora.dropout != 0.0) {
    throw InputError(origin + ": lora_dropout " + std::to_string(finetune.lora.dropout) +
                     ": the CPU runtime implements no dropout; expected lora_dropout 0");
  }
  // Mixture-of-experts MLPs, a head_dim apart from hidden / heads and Qwen3's q/k norms have no kernels here yet.
  if (arch.mla) {
    throw InputError(origin + ": DeepSeek's multi-head latent attention (DeepSeek-V2/V3) is not supported by the "
                     "runtime yet");
  }
  if (arch.moe) {
    throw InputError(origin + ": mixture-of-experts blocks (Mixtral, Qwen-MoE, GraniteMoE, Phi-3.5-MoE, gpt-oss) are "
                     "not supported by the runtime yet");
  }
  if (arch.sandwich_norms || arch.final_logit_softcap > 0) {
    throw InputError(origin + ": Gemma 2/3's sandwich norms and logit soft-capping are not supported by the runtime yet");
  }
  if (arch.fused_projections) {
    throw InputError(origin + ": fused qkv/gate_up projections (Phi-3) are not supported by the runtime yet");
  }
  if (!arch.gated_mlp || arch.parallel_residual || arch.fused_qkv || arch.naming != DecoderArchitecture::Naming::llama) {
    throw InputError(origin + ": two-matrix GELU MLPs, parallel attention/MLP blocks, fused q/k/v and non-llama module "
                     "names (StarCoder2, Falcon, Cohere, InternLM2) are not supported by the runtime yet");
  }
  if (arch.layer_norm || arch.lm_head_bias || arch.post_norms) {
    throw InputError(origin + ": LayerNorms, a biased lm_head and post-norms (Phi-3.5-MoE, OLMo 2) are not supported by "
                     "the runtime yet");
  }
  if (arch.o_proj_bias || arch.mlp_bias) {
    throw InputError(origin + ": biases on o_proj or on the MLP (a Llama config's attention_bias or mlp_bias) are not "
                     "supported by the runtime yet");
  }
  if (arch.sliding_window != 0 || arch.attention_sinks) {
    throw InputError(origin + ": sliding-window attention (StarCoder2, gpt-oss, Mistral v0.1, Gemma 2/3, Qwen2 with "
                     "use_sliding_window) and attention sinks (gpt-oss) are not supported by the runtime yet");
  }
  if (arch.explicit_head_dim != 0 || arch.qk_norm) {
    throw InputError(origin + ": a head_dim other than hidden_size / num_heads and q/k norms (Qwen3, OLMo 2, Gemma 3) "
                     "are not supported by the runtime yet");
  }
  if (arch.num_heads < 1 || arch.num_kv_heads < 1 || arch.hidden_size % arch.num_heads != 0 ||
      arch.num_heads % arch.num_kv_heads != 0) {
    throw InputError(origin + ": expected num_heads dividing hidden_size and num_kv_heads dividing num_heads");
  }
  DecoderDims dims;
  dims.vocab_size = arch.vocab_size;
  dims.hidden_size = arch.hidden_size;
  dims.intermediate_size = arch.intermediate_size;
  dims.num_heads = arch.num_heads;
  dims.num_kv_heads = arch.num_kv_heads;
  dims.head_dim = arch.head_dim();
  dims.max_positions = arch.max_position_embeddings;
  dims.attention_bias = arch.attention_bias;
  if (finetune.uses_lora()) dims.lora_scaling = finetune.lora.alpha / static_cast<double>(finetune.lora.r);
  // RoPE rotates pairs (i, i + head_dim/2) of each head (Su et al. 2021), so the head dimension must be even.
  if (dims.head_dim % 2 != 0) {
    throw InputError(origin + ": RoPE needs an even head dimension, got " + std::to_string(dims.head_dim));
  }
  return dims;
}

namespace {

std::span<const std::int32_t> batch_ids(const Batch& batch, LayerKernel::InputIds which) {
  switch (which) {
    case LayerKernel::InputIds::tokens: return batch.tokens;
    case LayerKernel::InputIds::targets: return batch.targets;
    case LayerKernel::InputIds::none: return {};
  }
  return {};
}

void check_batch(const Batch& batch) {
  if (batch.micro_batch < 1 || batch.seq_len < 1) {
    throw InputError("batch: expected positive micro_batch and seq_len, got " + std::to_string(batch.micro_batch) +
                     " and " + std::to_string(batch.seq_len));
  }
  const auto expected = static_cast<std::size_t>(batch.token_count() * std::max(batch.group_degree, 1));
  if (batch.tokens.size() != expected || batch.targets.size() != expected) {
    throw InputError("batch: expected " + std::to_string(expected) + " tokens and targets, got " +
                     std::to_string(batch.tokens.size()) + " and " + std::to_string(batch.targets.size()));
  }
}

}  // namespace

LayerForward LayerKernel::forward(const LayerParams& params, const Batch& batch, const Activations& input,
                                  ActivationCheckpointing checkpointing) const {
  check_batch(batch);
  LayerInput in;
  in.micro_batch = batch.micro_batch;
  in.seq_len = batch.seq_len;
  in.ids = batch_ids(batch, input_ids());
  SHARDPLAN_CHECK(batch.group_degree == 1 || input_ids() == InputIds::none || reads_group_ids(),
                  std::string(kernel_name()) + ": reads its rows' ids, given a TP group's micro-batch");
  if (kind() != LayerKind::embedding) {
    SHARDPLAN_CHECK(input.micro_batch == batch.micro_batch && input.seq_len == batch.seq_len &&
                        input.width == input_width() &&
                        static_cast<std::int64_t>(input.values.size()) == batch.token_count() * input_width(),
                    std::string(kernel_name()) + ": input activations do not match the batch and layer width");
    in.hidden = input.values;
  }
  LayerForward result;
  SavedActivations& saved = result.saved;
  saved.micro_batch = batch.micro_batch;
  saved.seq_len = batch.seq_len;
  saved.checkpointing = checkpointing;
  if (backward_reads_input() || checkpointing != ActivationCheckpointing::none) {
    saved.input.assign(in.hidden.begin(), in.hidden.end());
  }
  saved.ids.assign(in.ids.begin(), in.ids.end());
  // Under full checkpointing the kernel runs its ordinary forward and the driver then drops what it kept, so the
  // output is bitwise that of the un-checkpointed run.
  const bool full = checkpointing == ActivationCheckpointing::full;
  result.output = run_forward(params, in, full ? ActivationCheckpointing::none : checkpointing, saved);
  if (full) {
    const std::int64_t complete = saved.bytes();
    saved.keep_only_inputs();
    result.workspace_bytes = complete - saved.bytes();
  }
  return result;
}

SavedActivations LayerKernel::recompute(const LayerParams& params, const SavedActivations& checkpointed) const {
  SavedActivations complete;
  complete.micro_batch = checkpointed.micro_batch;
  complete.seq_len = checkpointed.seq_len;
  complete.checkpointing = ActivationCheckpointing::none;
  complete.input = checkpointed.input;
  complete.ids = checkpointed.ids;
  LayerInput in{complete.micro_batch, complete.seq_len, complete.input, complete.ids};
  (void)run_forward(params, in, ActivationCheckpointing::none, complete);
  return complete;
}

Activations LayerKernel::backward(const LayerParams& params, const SavedActivations& saved,
                                  const Activations& grad_output, const LayerParams& grads) const {
  const bool scalar_output = kind() == LayerKind::lm_head;
  SHARDPLAN_CHECK(scalar_output ? grad_output.values.size() == 1
                                : (grad_output.micro_batch == saved.micro_batch &&
                                   grad_output.seq_len == saved.seq_len && grad_output.width == output_width() &&
                                   static_cast<std::int64_t>(grad_output.values.size()) ==
                                       grad_output.token_count() * output_width()),
                  std::string(kernel_name()) + ": grad_output does not match the layer's output");
  if (saved.checkpointing == ActivationCheckpointing::full) {
    return run_backward(params, recompute(params, saved), grad_output, grads);
  }
  return run_backward(params, saved, grad_output, grads);
}

}  // namespace shardplan::runtime
