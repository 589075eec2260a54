// TrainingConfig validation, gradient-accumulation arithmetic and JSON rendering.
#include "training.h"

#include <algorithm>

#include "errors.h"
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
  return global_batch / per_step;
}

ActivationCheckpointing checkpointing_from_string(const std::string& text) {
  if (text == "none") return ActivationCheckpointing::none;
  if (text == "full") return ActivationCheckpointing::full;
  if (text == "selective") return ActivationCheckpointing::selective;
  throw InputError("--ac '" + text + "': expected none, full or selective" +
                   did_you_mean(text, {"none", "full", "selective"}));
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
  // Bounds far beyond any real run keep every product below (micro-batch × seq × ranks) well inside 64 bits.
  constexpr std::int64_t kMaxTokensPerMicroBatch = std::int64_t{1} << 32;
  if (training.seq_len > (std::int64_t{1} << 24)) throw InputError("--seq-len: expected at most 16777216 tokens");
  if (training.micro_batch > (std::int64_t{1} << 20) ||
      training.micro_batch * training.seq_len > kMaxTokensPerMicroBatch) {
    throw InputError("--micro-batch: expected at most 2^32 tokens per micro-batch (micro-batch × seq-len)");
  }
  if (training.global_batch > (std::int64_t{1} << 32)) throw InputError("--global-batch: expected at most 2^32");
  if (model.architecture && training.seq_len > model.architecture->max_position_embeddings) {
    throw InputError("--seq-len " + std::to_string(training.seq_len) + ": expected at most the model's " +
                     std::to_string(model.architecture->max_position_embeddings) + " positions");
  }
}

nlohmann::json to_json(const TrainingConfig& training, int data_parallel_ranks) {
  return {{"seq_len", training.seq_len},
          {"micro_batch", training.micro_batch},
          {"global_batch",
           training.global_batch == 0 ? training.micro_batch * data_parallel_ranks : training.global_batch},
          {"grad_accumulation_steps", training.grad_accumulation_steps(data_parallel_ranks)},
          {"precision", training.precision.name},
          {"optimizer", to_string(training.optimizer)},
          {"activation_checkpointing", to_string(training.checkpointing)},
          {"checkpoint_every_blocks", training.checkpoint_every_blocks},
          {"flash_attention", training.flash_attention},
          {"no_sync_accumulation", training.no_sync_accumulation}};
}

}  // namespace shardplan
