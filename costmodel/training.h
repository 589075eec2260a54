// TrainingConfig: sequence length, batch sizes, precision, optimizer, activation checkpointing, attention kernel.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model_spec.h"
#include "precision.h"

namespace shardplan {

struct TrainingConfig {
  std::int64_t seq_len = 2048;
  std::int64_t micro_batch = 1;   // sequences per rank per forward/backward
  std::int64_t global_batch = 0;  // sequences per optimizer step across all replicas; 0 = one micro-batch per rank
  PrecisionRecipe precision = precision_recipe("bf16-mixed");
  OptimizerKind optimizer = OptimizerKind::adamw;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
  bool flash_attention = true;  // no s² activations; causal kernels skip the masked half of the work
  // Gradient accumulation: intermediate micro-batches skip the reduce-scatter and keep unsharded gradients (FSDP's
  // no_sync); costs memory, saves communication.
  bool no_sync_accumulation = false;

  std::int64_t tokens_per_micro_batch() const { return seq_len * micro_batch; }
  // global_batch / (micro_batch × data-parallel ranks); InputError when it does not divide evenly.
  std::int64_t grad_accumulation_steps(int data_parallel_ranks) const;
};

ActivationCheckpointing checkpointing_from_string(const std::string& text);  // none | full | selective

// Checks positivity and that the sequence fits the model's positions (when the model says). InputError names the flag.
void validate_training(const TrainingConfig& training, const ModelSpec& model);

// Note [Step work] (input_limits.h): InputError when a plan search over `data_parallel_ranks` ranks would simulate
// candidates past limits::kMaxSearchWork: layers x (2 + micro-batches per step of its largest candidate, micro-batch
// 1 when the global batch is fixed). `where` names the request in the message ("plan", "capacity at 1 GPU").
void check_search_work(const TrainingConfig& training, const ModelSpec& model, std::int64_t data_parallel_ranks,
                       const std::string& where);

nlohmann::json to_json(const TrainingConfig& training, int data_parallel_ranks);

}  // namespace shardplan
