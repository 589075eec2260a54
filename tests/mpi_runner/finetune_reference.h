// The single-process reference of a fine-tune (frozen parameters kept, AdamW on the trainable elements alone) and
// the model-order indices of the elements that train: what the fine-tuning tests share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runner_fixtures.h"

namespace shardplan::runner::testing {

// Model-order indices of the elements that train (param_layout.h, Note [Fine-tuning layout]).
inline std::vector<std::size_t> trainable_indices(const runtime::ModelLayout& layout) {
  std::vector<std::size_t> indices;
  for (std::size_t layer = 0; layer < layout.layers.size(); ++layer) {
    for (const runtime::TensorSlot& slot : layout.layers[layer].tensors) {
      if (!slot.trains) continue;
      const std::int64_t first = layout.layer_offsets_elements[layer] + slot.offset_elements;
      for (std::int64_t e = 0; e < slot.element_count; ++e) indices.push_back(static_cast<std::size_t>(first + e));
    }
  }
  return indices;
}

// The single-process reference of a fine-tune: the whole model's forward and backward (every gradient, frozen ones
// too), then AdamW on the trainable elements alone. Moments are kept in model order (0 on frozen elements).
inline ReferenceRun finetune_reference(const ModelSpec& model, const runtime::ByteTextDataset& data, int steps,
                                       int micro_batches, int world_size, std::uint64_t seed,
                                       const runtime::AdamWOptions& adamw) {
  runtime::ModelRuntime reference(model);
  const std::vector<std::size_t> trains = trainable_indices(reference.layout());
  ReferenceRun run;
  run.final_params = reference.init_parameters(seed);
  run.initial_params = run.final_params;
  std::vector<float> grads(run.final_params.size());
  std::vector<float> p(trains.size()), g(trains.size()), m(trains.size(), 0.0f), v(trains.size(), 0.0f);
  for (int step = 0; step < steps; ++step) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    const runtime::Batch batch = global_batch(data, step, micro_batches, world_size);
    run.losses.push_back(reference.forward_backward(run.final_params, batch, grads).loss);
    for (std::size_t i = 0; i < trains.size(); ++i) {
      p[i] = run.final_params[trains[i]];
      g[i] = grads[trains[i]];
    }
    runtime::adamw_step(p, g, m, v, step + 1, adamw);
    std::vector<float> m_model(grads.size(), 0.0f), v_model(grads.size(), 0.0f);
    for (std::size_t i = 0; i < trains.size(); ++i) {
      run.final_params[trains[i]] = p[i];
      m_model[trains[i]] = m[i];
      v_model[trains[i]] = v[i];
    }
    run.exp_avg.push_back(std::move(m_model));
    run.exp_avg_sq.push_back(std::move(v_model));
  }
  return run;
}

// A run's whole model gathered back (`params`, laid out as `layout`) against the reference's: how many frozen
// elements changed at all (bit for bit), how many trainable ones are past relative 1e-5 (floor 1e-6), and the
// trainable elements' movement against the reference's (‖Δp − Δp_ref‖/‖Δp_ref‖, 1 when they never moved).
struct GatheredFinetune {
  std::size_t trainable = 0, frozen_changed = 0, trainable_mismatches = 0;
  double moved = 1;
};
inline GatheredFinetune compare_gathered(const std::vector<float>& params, const ReferenceRun& reference,
                                         const runtime::ModelLayout& layout) {
  GatheredFinetune result;
  const std::vector<std::size_t> trains = trainable_indices(layout);
  result.trainable = trains.size();
  std::vector<bool> is_trainable(params.size(), false);
  for (const std::size_t i : trains) is_trainable[i] = true;
  std::vector<float> trained, reference_trained, initial;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!is_trainable[i]) {
      if (std::memcmp(&params[i], &reference.initial_params[i], sizeof(float)) != 0) ++result.frozen_changed;
      continue;
    }
    if (!close(params[i], reference.final_params[i], 1e-5, 0.1)) ++result.trainable_mismatches;
    trained.push_back(params[i]);
    reference_trained.push_back(reference.final_params[i]);
    initial.push_back(reference.initial_params[i]);
  }
  result.moved = movement_distance(trained, initial, reference_trained);
  return result;
}

}  // namespace shardplan::runner::testing
