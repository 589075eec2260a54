// TrainingConfig: sequence length, batch sizes, precision, optimizer, activation checkpointing, attention kernel.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "finetune.h"
#include "loss.h"
#include "model_spec.h"
#include "precision.h"

namespace shardplan {

// The fused attention kernel a run uses when flash_attention is set: FlashAttention-2 (flash-attn 2.x, and what
// PyTorch's SDPA runs on sm80/sm90) or the older Triton FlashAttention (flash_attn_triton, MPT's attn_impl: triton).
// eager: no fused kernel but eager PyTorch's composite ops (HF attn_implementation="eager"), with flash_attention
// false: the scores are materialised and each op keeps what its autograd node saves (Note [Eager composite
// activations] in model_spec.h). flash_attention false with flash or triton: the scores are materialised by kernels
// that keep the minimal set (shardplan's runtimes, --no-flash-attention).
enum class AttentionKernel { flash, triton, eager };
const char* to_string(AttentionKernel kernel);
AttentionKernel attention_kernel_from_string(const std::string& text);  // flash | triton | eager

struct TrainingConfig {
  std::int64_t seq_len = 2048;
  std::int64_t micro_batch = 1;   // sequences per rank per forward/backward
  std::int64_t global_batch = 0;  // sequences per optimizer step across all replicas; 0 = one micro-batch per rank
  PrecisionRecipe precision = precision_recipe("bf16-mixed");
  OptimizerKind optimizer = OptimizerKind::adamw;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
  // `checkpointing` applies to every k-th transformer block, counted from 1 (blocks k, 2k, ...): torchtitan's layer
  // selective AC (`selective_ac_option = "k"`: its _apply_layer_sac wraps a block when count % k == 0). 1 = all.
  std::int64_t checkpoint_every_blocks = 1;
  bool flash_attention = true;  // no s² activations; causal kernels skip the masked half of the work
  AttentionKernel attention_kernel = AttentionKernel::flash;  // which fused kernel, when flash_attention
  // Gradient accumulation: intermediate micro-batches skip the reduce-scatter and keep unsharded gradients (FSDP's
  // no_sync); costs memory, saves communication.
  bool no_sync_accumulation = false;
  // Which parameters train (full, frozen patterns, LoRA, QLoRA) and under which FSDP front end. The model a plan is
  // lowered against must be resolved for it (finetuned_model in finetune_apply.h).
  FinetuneConfig finetune;
  // Expert parallelism (Note [Expert parallelism] in planner/unit_layout.h): each MoE block's routed experts are split
  // over groups of this many consecutive ranks, tokens reach them by all-to-all; 1: FSDP alone (every rank gathers
  // every expert). Plan JSON "training": {"expert_parallel_degree"}; CLI --expert-parallel.
  int expert_parallel_degree = 1;
  // torch.compile on each transformer block (torchtitan's `compile`): AOTAutograd's partitioner decides what the block
  // keeps for backward (Note [Compiled blocks] in compiled_block.h). Plan JSON "training": {"torch_compile"}; CLI
  // --compile.
  bool torch_compile = false;
  // How the output head's loss runs (Note [Fine-tuning losses] in loss.h); the model a plan is lowered against must be
  // resolved for it (model_for_loss). Plan JSON "training": {"loss"}; CLI --loss.
  LossKind loss = LossKind::cross_entropy;
  // Activation offloading (Note [Activation offloading] in planner/activation_offload.h): torchtune's
  // enable_activation_offloading — each layer's kept activations go to pinned host memory after its forward and come
  // back before its backward. Plan JSON "training": {"activation_offload"}; CLI --activation-offload.
  bool activation_offload = false;
  // Optimizer in backward (Note [Optimizer in backward] in planner/optimizer_in_backward.h): torchtune's
  // optimizer_in_bwd — each unit's parameters are stepped as soon as their gradients are reduced, so the gradients are
  // never held all at once. Plan JSON "training": {"optimizer_in_backward"}; CLI --optimizer-in-backward.
  bool optimizer_in_backward = false;

  // Tokens of the training sequence in one micro-batch: what throughput counts.
  std::int64_t tokens_per_micro_batch() const { return seq_len * micro_batch; }
  // The tokens `layer` processes in one micro-batch (Note [Tokens per sample] in model_spec.h): its own count per
  // sample where the model fixes one, else the training sequence. Every per-layer cost multiplies by this.
  std::int64_t tokens_per_micro_batch(const LayerSpec& layer) const {
    return layer.tokens_per_sample(seq_len) * micro_batch;
  }
  // What the blocks keep of attention (LayerSpec::activation_bytes_per_token), from flash_attention and the kernel.
  AttentionActivations attention_activations() const;
  // global_batch / (micro_batch × data-parallel ranks); InputError when it does not divide evenly.
  std::int64_t grad_accumulation_steps(int data_parallel_ranks) const;
};

// none | full | selective-op | selective (= attention-core)
ActivationCheckpointing checkpointing_from_string(const std::string& text);

// The mode of the transformer block with index `block` (0-based, among blocks): `checkpointing` on every
// checkpoint_every_blocks-th block, none on the others.
ActivationCheckpointing block_checkpointing(const TrainingConfig& training, std::size_t block);

// Checks positivity, the ranges of Note [Input limits], that the sequence fits the model's positions (when the model
// says), the fine-tuning settings that need no model (validate_finetune) and that one micro-batch's step stays below
// limits::kMaxStepBytes. InputError names the flag.
void validate_training(const TrainingConfig& training, const ModelSpec& model);

// Note [Expert parallelism] (planner/unit_layout.h): expert_parallel_degree is 1, or divides the routed experts of
// every MoE block of `model` (a model without experts takes only 1); not combined with fine-tuning yet. InputError
// naming --expert-parallel.
void validate_expert_parallel(const TrainingConfig& training, const ModelSpec& model);

// Every byte a step of `micro_batches` micro-batches could allocate, summed in a double (it cannot overflow): each
// micro-batch's activations without recompute, in fp32, twice over (a recompute allocates them again), and the model
// states several times over (sharded, gathered, gradients, optimizer states: at most 32 bytes per parameter per
// micro-batch). Below limits::kMaxStepBytes (2^60) every int64 byte count of a schedule and their sums are exact.
double step_bytes_bound(const TrainingConfig& training, const ModelSpec& model, std::int64_t micro_batches);
// InputError naming `where` and the settings when step_bytes_bound(...) is past limits::kMaxStepBytes.
void check_step_bytes(const TrainingConfig& training, const ModelSpec& model, std::int64_t micro_batches,
                      const std::string& where);

// Note [Step work] (input_limits.h): InputError when a plan search over `data_parallel_ranks` ranks would simulate
// candidates past limits::kMaxSearchWork: layers x (2 + micro-batches per step of its largest candidate, the one of
// the smallest micro-batch the search tries — `smallest_micro_batch`, a pinned --micro-batch where the search keeps
// it, 1 where it searches the micro-batch — when the global batch is fixed). `where` names the request in the
// message ("plan", "capacity at 1 GPU").
void check_search_work(const TrainingConfig& training, const ModelSpec& model, std::int64_t data_parallel_ranks,
                       const std::string& where, std::int64_t smallest_micro_batch = 1);

// Note [8-bit optimizers] (precision.h): the 8-bit states are modelled on the device; a host step only at DeepSpeed
// CPU-Adam's fp32 AdamW rate (Note [CPU optimizer step], host_optimizer.h). InputError naming `flag` when `offloads`
// with an 8-bit optimizer, or when it does not with cpu-adamw (whose states live on the host only).
void check_optimizer_offload(const TrainingConfig& training, bool offloads, const std::string& flag);

// The fine-tuning recipe settings that are not the defaults, as the plans' and estimates' text prints them ("loss
// chunked-ce (torchtune CEWithChunkedOutputLoss, 8 chunks), optimizer adamw8bit (bitsandbytes)"); "" when none.
std::string recipe_text(const TrainingConfig& training);

nlohmann::json to_json(const TrainingConfig& training, int data_parallel_ranks);
// {"mode", "freeze", "lora": {...}, "bnb_4bit": {...}, "fsdp_version", "use_orig_params"}: the settings in force.
nlohmann::json to_json(const FinetuneConfig& finetune, const PrecisionRecipe& precision);

}  // namespace shardplan
