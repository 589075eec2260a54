// Shared fixtures of the runner suite: a small llama over bytes, plans per strategy, and the single-process reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "adamw.h"
#include "byte_text_dataset.h"
#include "data_parallel_batches.h"
#include "decoder_builder.h"
#include "errors.h"
#include "model_presets.h"
#include "model_runtime.h"
#include "param_layout.h"
#include "plan.h"
#include "schedule.h"

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

// The executor's toy preset (model_presets.cpp) as `--model tiny-llama` builds it: the TP, pipeline and CP tests'.
inline ModelSpec tiny_llama() {
  const auto preset = find_model_preset("tiny-llama");
  if (!preset) throw InternalError("no model preset 'tiny-llama'");
  return build_decoder(preset->name, preset->architecture, "preset");
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
  std::vector<float> initial_params;
  std::vector<float> final_params;
  // AdamW's first and second moments after each step (model_layout order): m is linear in the step's gradients and
  // v quadratic, so they show the reduced gradient itself — which AdamW's update m/√v is blind to the scale of.
  std::vector<std::vector<float>> exp_avg, exp_avg_sq;
};

// The single-process reference: the whole model, each step on the concatenated global batch, AdamW on all of it.
inline ReferenceRun reference_training(const ModelSpec& model, const runtime::ByteTextDataset& data, int steps,
                                       int micro_batches, int world_size, std::uint64_t seed,
                                       const runtime::AdamWOptions& adamw) {
  runtime::ModelRuntime reference(model);
  ReferenceRun run;
  run.final_params = reference.init_parameters(seed);
  run.initial_params = run.final_params;
  std::vector<float> grads(run.final_params.size());
  std::vector<float> m(grads.size(), 0.0f), v(grads.size(), 0.0f);
  for (int step = 0; step < steps; ++step) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    const runtime::Batch batch = global_batch(data, step, micro_batches, world_size);
    run.losses.push_back(reference.forward_backward(run.final_params, batch, grads).loss);
    runtime::adamw_step(run.final_params, grads, m, v, step + 1, adamw);
    run.exp_avg.push_back(m);
    run.exp_avg_sq.push_back(v);
  }
  return run;
}

// Elements [first, first + count) of a unit's flat parameter (Note [FlatParam layout]: its layers' slices of the
// model's flat buffer, concatenated in unit order, zeros in the padding) taken from `model_flat`. Written here from
// param_layout.h's definitions, not with the executor's own mapping, so a shard placed at the wrong model offsets
// differs from it.
inline std::vector<float> unit_slice(const runtime::ModelLayout& model, const runtime::UnitParamLayout& unit,
                                     const std::vector<float>& model_flat, std::int64_t first, std::size_t count) {
  std::vector<float> slice(count, 0.0f);
  for (std::size_t i = 0; i < unit.layers.size(); ++i) {
    const std::size_t layer = unit.layers[i];
    const std::int64_t unit_begin = unit.layer_offsets_elements[i];
    const std::int64_t model_begin = model.layer_offsets_elements[layer];
    for (std::int64_t e = 0; e < model.layers[layer].element_count; ++e) {
      const std::int64_t at = unit_begin + e - first;
      if (at >= 0 && at < static_cast<std::int64_t>(count)) {
        slice[static_cast<std::size_t>(at)] = model_flat[static_cast<std::size_t>(model_begin + e)];
      }
    }
  }
  return slice;
}

// The schedule's own memory per category, replayed in issue order (frees_at_start, then allocations at an op's
// start; frees at its end):
// each category's maximum, persistent bytes included.
inline MemoryByCategory predicted_peaks(const StepSchedule& schedule) {
  MemoryByCategory current = schedule.persistent;
  MemoryByCategory peak = current;
  for (const Op& op : schedule.ops) {
    for (const auto& change : op.frees_at_start) current[static_cast<std::size_t>(change.category)] -= change.bytes;
    for (const auto& change : op.allocates) current[static_cast<std::size_t>(change.category)] += change.bytes;
    for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) peak[i] = std::max(peak[i], current[i]);
    for (const auto& change : op.frees) current[static_cast<std::size_t>(change.category)] -= change.bytes;
  }
  return peak;
}

// ‖a − b‖ / ‖b‖ (0 when both are zero).
inline double relative_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double difference = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm == 0 ? (difference == 0 ? 0 : std::numeric_limits<double>::infinity()) : std::sqrt(difference / norm);
}

// How far the parameters moved from `initial` against how far the reference moved: ‖(p − p₀) − (r − p₀)‖ / ‖r − p₀‖.
// 1 for a run whose optimizer never stepped, whatever the tolerance of an elementwise comparison of p with r.
inline double movement_distance(const std::vector<float>& params, const std::vector<float>& initial,
                                const std::vector<float>& reference) {
  std::vector<float> moved(params.size()), reference_moved(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    moved[i] = params[i] - initial[i];
    reference_moved[i] = reference[i] - initial[i];
  }
  return relative_distance(moved, reference_moved);
}

// |a − b| ≤ tol·max(|a|, |b|, floor): relative, with an absolute floor for elements near zero.
inline bool close(double a, double b, double tol, double floor = 1e-2) {
  return std::abs(a - b) <= tol * std::max({std::abs(a), std::abs(b), floor});
}

}  // namespace shardplan::runner::testing
