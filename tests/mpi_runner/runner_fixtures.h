// Shared fixtures of the runner suite: a small llama over bytes, plans per strategy, and the single-process reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "adamw.h"
#include "byte_text_dataset.h"
#include "data_parallel_batches.h"
#include "decoder_builder.h"
#include "model_runtime.h"
#include "plan.h"

namespace shardplan::runner::testing {

// Byte vocabulary (the dataset's), two blocks, grouped-query heads, odd-sized units once padded for 3 ranks.
inline ModelSpec small_llama() {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::llama;
  arch.vocab_size = 256;
  arch.hidden_size = 32;
  arch.intermediate_size = 40;
  arch.num_layers = 2;
  arch.num_heads = 4;
  arch.num_kv_heads = 2;
  arch.max_position_embeddings = 64;
  return build_decoder("small-llama", arch, "test");
}

inline TrainingConfig fp32_training(std::int64_t seq_len, std::int64_t micro_batch, std::int64_t global_batch = 0,
                                    ActivationCheckpointing ac = ActivationCheckpointing::none) {
  TrainingConfig training;
  training.seq_len = seq_len;
  training.micro_batch = micro_batch;
  training.global_batch = global_batch;
  training.precision = precision_recipe("fp32");
  training.checkpointing = ac;
  // The CPU kernels materialise the attention probabilities (no flash kernel), so plans for them say so.
  training.flash_attention = false;
  return training;
}

inline Plan strategy_plan(const ModelSpec& model, const TrainingConfig& training, const std::string& strategy,
                          int world_size) {
  return default_plan(model, training, parse_strategy(strategy), wrap_per_block(model), world_size);
}

inline runtime::ByteTextDataset test_data(int micro_batch, int seq_len) {
  runtime::ByteTextDatasetOptions options;
  options.seed = 7;
  options.micro_batch = micro_batch;
  options.seq_len = seq_len;
  return runtime::ByteTextDataset(options);
}

struct ReferenceRun {
  std::vector<double> losses;
  std::vector<float> final_params;
};

// The single-process reference: the whole model, each step on the concatenated global batch, AdamW on all of it.
inline ReferenceRun reference_training(const ModelSpec& model, const runtime::ByteTextDataset& data, int steps,
                                       int micro_batches, int world_size, std::uint64_t seed,
                                       const runtime::AdamWOptions& adamw) {
  runtime::ModelRuntime reference(model);
  ReferenceRun run;
  run.final_params = reference.init_parameters(seed);
  std::vector<float> grads(run.final_params.size());
  std::vector<float> m(grads.size(), 0.0f), v(grads.size(), 0.0f);
  for (int step = 0; step < steps; ++step) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    const runtime::Batch batch = global_batch(data, step, micro_batches, world_size);
    run.losses.push_back(reference.forward_backward(run.final_params, batch, grads).loss);
    runtime::adamw_step(run.final_params, grads, m, v, step + 1, adamw);
  }
  return run;
}

// |a − b| ≤ tol·max(|a|, |b|, floor): relative, with an absolute floor for elements near zero.
inline bool close(double a, double b, double tol, double floor = 1e-2) {
  return std::abs(a - b) <= tol * std::max({std::abs(a), std::abs(b), floor});
}

}  // namespace shardplan::runner::testing
