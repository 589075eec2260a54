// TrainingConfig validation, gradient-accumulation arithmetic and JSON rendering.
#include "training.h"

#include <algorithm>
#include <cstdio>

#include "errors.h"
#include "input_limits.h"
#include "name_suggest.h"

namespace shardplan {

std::int64_t TrainingConfig::grad_accumulation_steps(int data_parallel_ranks) const {
  const std::int64_t per_step = micro_batch * data_parallel_ranks;
  if (global_batch == 0) return 1;
  if (global_batch % per_step != 0) {
    throw InputError("--global-batch " + std::to_string(global_batch) + ": expected a multiple of micro-batch × " +
                     "data-parallel ranks = " + std::to_string(micro_batch) + " × " +
                     std::to_string(data_parallel_ranks) + " = " + std::to_string(per_step));
  }
  const std::int64_t steps = global_batch / per_step;
  // Note [Step work] (input_limits.h): a step of more micro-batches than that cannot be simulated, even of one layer.
  if (steps > limits::kMaxLayerPassesPerStep) {
    throw InputError("--global-batch " + std::to_string(global_batch) + ": " + std::to_string(steps) +
                     " micro-batches per step (global batch / (micro-batch x data-parallel ranks)), expected at most " +
                     std::to_string(limits::kMaxLayerPassesPerStep));
  }
  return steps;
}

const char* to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::triton: return "triton";
    case AttentionKernel::eager: return "eager";
    case AttentionKernel::flash: break;
  }
  return "flash";
}

AttentionKernel attention_kernel_from_string(const std::string& text) {
  if (text == "flash") return AttentionKernel::flash;
  if (text == "triton") return AttentionKernel::triton;
  if (text == "eager") return AttentionKernel::eager;
  throw InputError("attention kernel '" + text + "': expected flash, triton or eager" +
                   did_you_mean(text, {"flash", "triton", "eager"}));
}

AttentionActivations TrainingConfig::attention_activations() const {
  if (flash_attention) return AttentionActivations::flash;
  return attention_kernel == AttentionKernel::eager ? AttentionActivations::eager_composite
                                                    : AttentionActivations::materialised;
}

ActivationCheckpointing checkpointing_from_string(const std::string& text) {
  if (text == "none") return ActivationCheckpointing::none;
  if (text == "full") return ActivationCheckpointing::full;
  // "selective" keeps its meaning (Korthikanti's attention-core recompute); "attention-core" names it plainly.
  if (text == "selective" || text == "attention-core") return ActivationCheckpointing::selective;
  if (text == "selective-op") return ActivationCheckpointing::selective_op;
  throw InputError("--ac '" + text + "': expected none, full, selective-op or selective (attention-core)" +
                   did_you_mean(text, {"none", "full", "selective-op", "selective", "attention-core"}));
}

ActivationCheckpointing block_checkpointing(const TrainingConfig& training, std::size_t block) {
  const auto every = static_cast<std::size_t>(std::max<std::int64_t>(training.checkpoint_every_blocks, 1));
  return (block + 1) % every == 0 ? training.checkpointing : ActivationCheckpointing::none;
}

void validate_training(const TrainingConfig& training, const ModelSpec& model) {
  if (training.seq_len < 1) throw InputError("--seq-len: expected a positive integer");
  if (training.micro_batch < 1) throw InputError("--micro-batch: expected a positive integer");
  if (training.global_batch < 0) throw InputError("--global-batch: expected a non-negative integer");
  if (training.checkpoint_every_blocks < 1 ||
      training.checkpoint_every_blocks > std::max<std::int64_t>(1, static_cast<std::int64_t>(model.block_count()))) {
    throw InputError("--ac-every: expected a whole number of blocks from 1 to the model's " +
                     std::to_string(model.block_count()));
  }
  // Note [Input limits]: far beyond any real run, they keep every product (micro-batch × seq × ranks) inside 64 bits.
  if (training.seq_len > limits::kMaxSeqLen) throw InputError("--seq-len: expected at most 16777216 tokens");
  if (training.micro_batch > limits::kMaxMicroBatch ||
      training.micro_batch * training.seq_len > limits::kMaxTokensPerMicroBatch) {
    throw InputError("--micro-batch: expected at most 2^32 tokens per micro-batch (micro-batch × seq-len)");
  }
  for (const LayerSpec& layer : model.layers) {  // Note [Tokens per sample]: a layer with its own count
    if (layer.fixed_tokens_per_sample && training.tokens_per_micro_batch(layer) > limits::kMaxTokensPerMicroBatch) {
      throw InputError("--micro-batch: expected at most 2^32 tokens per micro-batch in layer " + layer.name + " (" +
                       std::to_string(*layer.fixed_tokens_per_sample) + " tokens per sample)");
    }
  }
  if (training.global_batch > limits::kMaxGlobalBatch) throw InputError("--global-batch: expected at most 2^32");
  if (training.flash_attention && training.attention_kernel == AttentionKernel::eager) {
    throw InputError("attention_kernel eager: expected flash_attention false (eager attention materialises the scores)");
  }
  // Note [Long context] (model_spec.h): a config that names RoPE scaling may train past max_position_embeddings.
  if (!model.architecture && model.max_positions > 0 && training.seq_len > model.max_positions) {
    throw InputError("--seq-len " + std::to_string(training.seq_len) + ": expected at most the model's " +
                     std::to_string(model.max_positions) + " positions (its decoder's, with any RoPE scaling)");
  }
  if (model.architecture && training.seq_len > model.architecture->max_trainable_positions()) {
    const DecoderArchitecture& arch = *model.architecture;
    throw InputError("--seq-len " + std::to_string(training.seq_len) + ": expected at most the model's " +
                     std::to_string(arch.max_trainable_positions()) + " positions" +
                     (arch.rope_scaled_positions > 0 ? " (its rope_scaling's factor × original positions)"
                      : arch.family == DecoderArchitecture::Family::gpt2
                          ? ""
                          : " (max_position_embeddings; a config whose rope_scaling names a factor reaches further)"));
  }
  validate_finetune(training.finetune, training.precision, FinetuneFieldNames::cli());
  validate_expert_parallel(training, model);
  check_step_bytes(training, model, 1, "--micro-batch");
}

void validate_expert_parallel(const TrainingConfig& training, const ModelSpec& model) {
  const int degree = training.expert_parallel_degree;
  const std::string flag = "--expert-parallel " + std::to_string(degree);
  if (degree < 1 || degree > limits::kMaxWorldSize) throw InputError(flag + ": expected a positive number of ranks");
  if (degree == 1) return;
  bool has_experts = false;
  for (const LayerSpec& layer : model.layers) {
    if (!layer.moe) continue;
    has_experts = true;
    if (layer.moe->num_experts % degree != 0) {
      throw InputError(flag + ": expected a divisor of the " + std::to_string(layer.moe->num_experts) +
                       " experts of " + layer.name);
    }
  }
  if (!has_experts) throw InputError(flag + ": the model has no experts; expected 1");
  if (!training.finetune.trains_all()) throw InputError(flag + ": expert parallelism with fine-tuning is not supported yet");
}

double step_bytes_bound(const TrainingConfig& training, const ModelSpec& model, std::int64_t micro_batches) {
  double activation_bytes = 0;  // per micro-batch
  for (const LayerSpec& layer : model.layers) {
    activation_bytes += layer.activation_bytes_per_token(training.seq_len, 4, training.attention_activations(),
                                                        ActivationCheckpointing::none) *
                        static_cast<double>(training.tokens_per_micro_batch(layer));
  }
  const double per_micro_batch = 2.0 * activation_bytes + 32.0 * static_cast<double>(model.param_count());
  return per_micro_batch * static_cast<double>(micro_batches);
}

void check_step_bytes(const TrainingConfig& training, const ModelSpec& model, std::int64_t micro_batches,
                      const std::string& where) {
  const double bytes = step_bytes_bound(training, model, micro_batches);
  if (bytes <= limits::kMaxStepBytes) return;  // NaN or inf fail too
  char text[48];
  std::snprintf(text, sizeof text, "%.3g", bytes);
  throw InputError(where + ": a step of model '" + model.name + "' at seq-len " + std::to_string(training.seq_len) +
                   ", micro-batch " + std::to_string(training.micro_batch) + " x " + std::to_string(micro_batches) +
                   " could allocate " + text + " bytes: expected at most 2^60 (1 EiB)");
}

void check_search_work(const TrainingConfig& training, const ModelSpec& model, std::int64_t data_parallel_ranks,
                       const std::string& where, std::int64_t smallest_micro_batch) {
  const auto layers = static_cast<std::int64_t>(model.layers.size());
  // The search tries the micro-batches dividing a fixed global batch from `smallest_micro_batch` up
  // (planner/knob_settings.cpp): the smallest has the most micro-batches per step.
  const std::int64_t sequences_per_rank =
      training.global_batch > 0 ? std::max<std::int64_t>(1, training.global_batch / std::max<std::int64_t>(
                                                                                     1, data_parallel_ranks))
                                : 1;
  const std::int64_t micro_batches =
      std::max<std::int64_t>(1, sequences_per_rank / std::max<std::int64_t>(1, smallest_micro_batch));
  const std::int64_t work = layers * (2 + micro_batches);  // both at most 2^32 and 10^4: no overflow
  // The search's candidates cover every micro-batch up to all of a rank's sequences in one; the floors and schedules
  // of the largest must stay exact too (wrap_memory_floor.h rounds its bytes to int64).
  TrainingConfig largest = training;
  largest.micro_batch = std::max(training.micro_batch, sequences_per_rank * training.micro_batch);
  check_step_bytes(largest, model, 1, where);
  if (work > limits::kMaxSearchWork) {
    throw InputError(where + ": the search would simulate " + std::to_string(layers) + " layers x (2 + " +
                     std::to_string(micro_batches) + " micro-batches per step) = " + std::to_string(work) +
                     " layer passes per candidate, expected at most " + std::to_string(limits::kMaxSearchWork) +
                     " (a smaller --global-batch, or more GPUs)");
  }
}

void check_optimizer_offload(const TrainingConfig& training, bool offloads, const std::string& flag) {
  if (training.optimizer == OptimizerKind::cpu_adamw && !offloads) {  // Note [CPU optimizer step]
    throw InputError("--optimizer cpu-adamw without " + flag + ": DeepSpeed's CPU-Adam steps optimizer states held " +
                     "in host memory; expected " + flag + ", or --optimizer adamw");
  }
  if (!offloads || !is_8bit(training.optimizer)) return;
  throw InputError(flag + " with --optimizer " + to_string(training.optimizer) +
                   ": the 8-bit states are modelled on the GPU, and a host step only for fp32 AdamW (DeepSpeed "
                   "CPU-Adam's rate); expected --optimizer adamw, or no CPU offload");
}

std::string recipe_text(const TrainingConfig& training) {
  std::string text;
  if (training.loss == LossKind::chunked_ce) {
    text = "loss chunked-ce (torchtune CEWithChunkedOutputLoss, " + std::to_string(kChunkedOutputLossChunks) +
           " chunks upcast to fp32 one at a time)";
  } else if (training.loss == LossKind::linear_ce) {
    text = "loss linear-ce (Liger fused linear cross-entropy: logits one chunk at a time, no fp32 copy)";
  }
  if (is_8bit(training.optimizer)) {
    text += std::string(text.empty() ? "" : ", ") + "optimizer " + to_string(training.optimizer) +
            " (bitsandbytes: 1-byte m and v, an fp32 absmax per 256 elements)";
  }
  if (training.optimizer == OptimizerKind::cpu_adamw) {  // Note [CPU optimizer step] (host_optimizer.h)
    text += std::string(text.empty() ? "" : ", ") +
            "optimizer cpu-adamw (DeepSpeed CPU-Adam: fp32 states and step in host memory)";
  }
  if (training.activation_offload) {  // Note [Activation offloading] (planner/activation_offload.h)
    text += std::string(text.empty() ? "" : ", ") +
            "activation offload (torchtune OffloadActivations: kept activations to pinned host memory by layer, "
            "the output head's kept on the GPU)";
  }
  if (training.optimizer_in_backward) {  // Note [Optimizer in backward] (planner/optimizer_in_backward.h)
    text += std::string(text.empty() ? "" : ", ") +
            "optimizer in backward (torchtune optimizer_in_bwd: each unit stepped after its gradient reduction, "
            "gradients never held all at once)";
  }
  return text;
}

nlohmann::json to_json(const TrainingConfig& training, int data_parallel_ranks) {
  nlohmann::json document = {{"seq_len", training.seq_len},
                             {"micro_batch", training.micro_batch},
                             {"global_batch", training.global_batch == 0 ? training.micro_batch * data_parallel_ranks
                                                                         : training.global_batch},
                             {"grad_accumulation_steps", training.grad_accumulation_steps(data_parallel_ranks)},
                             {"precision", training.precision.name},
                             {"optimizer", to_string(training.optimizer)},
                             {"activation_checkpointing", to_string(training.checkpointing)},
                             {"checkpoint_every_blocks", training.checkpoint_every_blocks},
                             {"flash_attention", training.flash_attention},
                             {"attention_kernel", to_string(training.attention_kernel)},
                             {"no_sync_accumulation", training.no_sync_accumulation},
                             {"expert_parallel_degree", training.expert_parallel_degree},
                             {"finetune", to_json(training.finetune, training.precision)}};
  if (training.torch_compile) document["torch_compile"] = true;  // eager runs report as before
  if (training.loss != LossKind::cross_entropy) document["loss"] = to_string(training.loss);  // as before when plain
  if (training.activation_offload) document["activation_offload"] = true;  // as before when off
  if (training.optimizer_in_backward) document["optimizer_in_backward"] = true;  // as before when off
  return document;
}

nlohmann::json to_json(const FinetuneConfig& finetune, const PrecisionRecipe& precision) {
  nlohmann::json document = {{"mode", to_string(finetune.mode)}, {"fsdp_version", finetune.fsdp.version}};
  if (finetune.fsdp.version == 1) document["use_orig_params"] = finetune.fsdp.use_orig_params;
  if (finetune.mode == FinetuneMode::frozen) document["freeze"] = finetune.freeze;
  if (finetune.uses_lora()) {
    document["lora"] = {{"r", finetune.lora.r},
                        {"alpha", finetune.lora.alpha},
                        {"dropout", finetune.lora.dropout},
                        {"target_modules", finetune.lora.target_modules}};
  }
  if (finetune.mode == FinetuneMode::qlora) {
    document["bnb_4bit"] = {{"quant_type", finetune.bnb.quant_type},
                            {"use_double_quant", finetune.bnb.use_double_quant},
                            {"quant_storage", to_string(finetune.quant_storage(precision))},
                            {"compute_dtype", to_string(finetune.quant_compute(precision))}};
  }
  return document;
}

}  // namespace shardplan
