// One layer, or the whole model, run forward and backward on the CPU runtime and on the device from the same inputs,
// with what each run gives back for the comparisons of the tests.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu_model_test_support.h"
#include "model_runtime.h"

namespace shardplan::gpu::testing {

// The inputs shared by the CPU and device runs of model layer `index`.
struct LayerCase {
  ModelSpec model;
  runtime::ModelLayout layout;
  std::size_t index = 0;
  std::vector<float> params;          // the whole model's flat parameter; bf16-representable for a bf16 case
  runtime::Batch batch;
  runtime::Activations input;         // empty for the embedding
  runtime::Activations grad_output;   // dL/d(output); for the lm_head the scalar loss_scale
  std::vector<float> grad_prefill;    // the model's gradient before backward: backward must ADD to it
  std::size_t owner() const { return layout.param_owner[index]; }
  const runtime::LayerLayout& owner_layout() const { return layout.layers[owner()]; }
  std::int64_t owner_offset() const { return layout.layer_offsets_elements[owner()]; }
  bool is_loss() const { return model.layers[index].kind == LayerKind::lm_head; }
};

inline LayerCase make_layer_case(const ModelSpec& model, std::size_t index, bool bf16_params) {
  using runtime::testing::uniform_buffer;
  LayerCase c{model, runtime::model_layout(model), index, {}, {}, {}, {}, {}};
  c.params = test_parameters(c.layout);
  if (bf16_params) c.params = rounded_to_bf16(c.params);
  c.batch = runtime::testing::random_batch(kMicroBatch, kSeqLen, model.vocab_size, 9);
  if (model.layers[index].kind != LayerKind::embedding) {
    c.input = runtime::Activations::zeros(kMicroBatch, kSeqLen, model.hidden_size);
    c.input.values = uniform_buffer(c.input.values.size(), 13, -1.0f, 1.0f);
  }
  if (c.is_loss()) {
    c.grad_output = runtime::Activations::scalar(1.0f / 3.0f);  // as over 3 accumulated micro-batches
  } else {
    c.grad_output = runtime::Activations::zeros(kMicroBatch, kSeqLen, model.hidden_size);
    c.grad_output.values = uniform_buffer(c.grad_output.values.size(), 15, -1.0f, 1.0f);
  }
  c.grad_prefill = uniform_buffer(c.params.size(), 17, -1e-3f, 1e-3f);
  return c;
}

// What one run gives: the output (the mean loss for the lm_head), dL/d(input) (empty for the embedding), the
// gradient it added into its owner's slice (after − before), and what forward kept.
struct LayerRun {
  std::vector<float> output;
  std::vector<float> grad_input;
  std::vector<float> grads;
  std::vector<std::string> saved_names;
  std::int64_t saved_bytes = 0;
};

inline std::vector<float> added_gradient(const LayerCase& c, const std::vector<float>& after) {
  std::vector<float> added(static_cast<std::size_t>(c.owner_layout().element_count));
  for (std::size_t i = 0; i < added.size(); ++i) {
    const std::size_t at = static_cast<std::size_t>(c.owner_offset()) + i;
    added[i] = after[at] - c.grad_prefill[at];
  }
  return added;
}

inline LayerRun run_cpu(const LayerCase& c, ActivationCheckpointing mode) {
  const auto kernel = runtime::make_layer_kernel(c.model, c.index);
  const runtime::LayerParams view = runtime::bind_model_layer(c.layout, c.index, std::span<const float>(c.params));
  runtime::LayerForward forward = kernel->forward(view, c.batch, c.input, mode);
  LayerRun run;
  run.output = forward.output.values;
  run.saved_names = forward.saved.names();
  run.saved_bytes = forward.saved.bytes();
  std::vector<float> grads = c.grad_prefill;
  run.grad_input = kernel->backward(view, forward.saved, c.grad_output,
                                    runtime::bind_model_layer(c.layout, c.index, std::span<float>(grads)))
                       .values;
  run.grads = added_gradient(c, grads);
  return run;
}

// The model's parameters on the device in `dtype` (the bf16 bits of bf16-representable values: exact), a gradient
// buffer holding `grad_values`, and the batch's ids.
struct DeviceModel {
  DeviceBuffer params;
  DeviceBuffer grads;
  DeviceBuffer tokens;
  DeviceBuffer targets;
  DeviceDType dtype = DeviceDType::f32;

  DeviceModel(DeviceEnv& env, const std::vector<float>& values, DeviceDType param_dtype,
              const std::vector<float>& grad_values, const runtime::Batch& batch)
      : params(param_dtype == DeviceDType::f32 ? env.upload(MemoryCategory::unsharded_params, values)
                                               : env.upload(MemoryCategory::unsharded_params, to_bf16(values))),
        grads(env.upload(MemoryCategory::unsharded_grads, grad_values)),
        tokens(env.upload(MemoryCategory::overhead, batch.tokens)),
        targets(env.upload(MemoryCategory::overhead, batch.targets)),
        dtype(param_dtype) {}

  DeviceBatch batch(const runtime::Batch& host) const {
    return {host.micro_batch, host.seq_len, tokens.as<std::int32_t>(), targets.as<std::int32_t>()};
  }
  // Layer `index`'s view: its owner's tensors for a tied layer, as runtime::bind_model_layer.
  DeviceLayerParams layer_params(const runtime::ModelLayout& layout, std::size_t index) const {
    const std::size_t owner = layout.param_owner[index];
    const auto* base = static_cast<const unsigned char*>(params.data());
    return bind_device_layer(layout.layers[owner],
                             base + layout.layer_offsets_elements[owner] * element_bytes(dtype), dtype);
  }
  DeviceLayerGrads layer_grads(const runtime::ModelLayout& layout, std::size_t index) const {
    const std::size_t owner = layout.param_owner[index];
    return bind_device_grads(layout.layers[owner], grads.as<float>() + layout.layer_offsets_elements[owner]);
  }
};

inline LayerRun run_device(DeviceEnv& env, const LayerCase& c, DeviceDType dtype, ActivationCheckpointing mode) {
  LayerRun run;
  {
    const DeviceModel device(env, c.params, dtype, c.grad_prefill, c.batch);
    const auto layer = make_device_layer(c.model, c.index);
    const DeviceContext context = env.context();
    const DeviceLayerParams params = device.layer_params(c.layout, c.index);
    DeviceActivations input;
    if (!c.input.values.empty()) input = env.upload_activations(c.input);
    DeviceLayerForward forward = layer->forward(context, params, device.batch(c.batch), std::move(input), mode);
    run.output = env.download(forward.output);
    run.saved_names = forward.saved.names();
    run.saved_bytes = forward.saved.bytes();
    DeviceActivations grad_output;
    float loss_scale = 1.0f;
    if (c.is_loss()) {
      loss_scale = c.grad_output.values.at(0);
    } else {
      grad_output = env.upload_activations(c.grad_output);
    }
    const DeviceActivations grad_input = layer->backward(context, params, forward.saved, grad_output,
                                                         device.layer_grads(c.layout, c.index), loss_scale);
    if (grad_input.buffer.allocated()) run.grad_input = env.download(grad_input);
    run.grads = added_gradient(c, env.download<float>(device.grads.data(), static_cast<std::int64_t>(c.params.size())));
  }
  env.sync();
  // Every activation, saved tensor and scratch buffer went back to the pool with its owner.
  CHECK(env.bytes(MemoryCategory::activations) == 0);
  return run;
}

// One tensor of a layer's gradient slice.
inline std::vector<float> tensor_of(const std::vector<float>& slice, const runtime::TensorSlot& slot) {
  const auto first = slice.begin() + static_cast<std::ptrdiff_t>(slot.offset_elements);
  return {first, first + static_cast<std::ptrdiff_t>(slot.element_count)};
}

// ---- The whole model, as runtime::ModelRuntime::forward_backward: checkpointing on the blocks only, every layer's
// saved state kept to the backward, a tied lm_head adding into the embedding's gradient.
struct ModelRun {
  float loss = 0.0f;
  std::vector<float> grads;
};

inline ModelRun run_cpu_model(const ModelSpec& model, const std::vector<float>& params, const runtime::Batch& batch,
                              ActivationCheckpointing mode, float loss_scale) {
  runtime::ModelRuntimeOptions options;
  options.checkpointing = mode;
  const runtime::ModelRuntime runtime(model, options);
  ModelRun run;
  run.grads.assign(params.size(), 0.0f);
  run.loss = runtime.forward_backward(params, batch, run.grads, loss_scale).loss;
  return run;
}

inline ModelRun run_device_model(DeviceEnv& env, const ModelSpec& model, const std::vector<float>& params,
                                 const runtime::Batch& batch, DeviceDType dtype, ActivationCheckpointing mode,
                                 float loss_scale) {
  const runtime::ModelLayout layout = runtime::model_layout(model);
  ModelRun run;
  {
    const DeviceModel device(env, params, dtype, std::vector<float>(params.size(), 0.0f), batch);
    const DeviceContext context = env.context();
    std::vector<std::unique_ptr<DeviceLayer>> layers;
    for (std::size_t index = 0; index < model.layers.size(); ++index) layers.push_back(make_device_layer(model, index));
    std::vector<DeviceSaved> saved;
    DeviceActivations hidden;
    for (std::size_t index = 0; index < layers.size(); ++index) {
      const ActivationCheckpointing layer_mode =
          layers[index]->kind() == LayerKind::transformer_block ? mode : ActivationCheckpointing::none;
      DeviceLayerForward step = layers[index]->forward(context, device.layer_params(layout, index),
                                                       device.batch(batch), std::move(hidden), layer_mode);
      hidden = std::move(step.output);
      saved.push_back(std::move(step.saved));
    }
    run.loss = env.download(hidden).at(0);
    DeviceActivations grad;  // the loss layer takes loss_scale instead
    for (std::size_t index = layers.size(); index-- > 0;) {
      grad = layers[index]->backward(context, device.layer_params(layout, index), saved[index], grad,
                                     device.layer_grads(layout, index), loss_scale);
      saved[index] = DeviceSaved();  // freed as soon as the layer is done, as ModelRuntime does
    }
    CHECK_FALSE(grad.buffer.allocated());  // the embedding returns no input gradient
    run.grads = env.download<float>(device.grads.data(), static_cast<std::int64_t>(params.size()));
  }
  env.sync();
  CHECK(env.bytes(MemoryCategory::activations) == 0);
  return run;
}

}  // namespace shardplan::gpu::testing
