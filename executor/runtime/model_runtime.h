// ModelRuntime: the whole llama-family model, layer after layer, as the single-process unsharded reference.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "layer_kernel.h"
#include "model_spec.h"
#include "param_init.h"
#include "param_layout.h"
#include "runtime_types.h"

namespace shardplan::runtime {

struct ModelRuntimeOptions {
  // Applied to transformer blocks only, as the memory model counts it (LayerSpec::activation_bytes_per_token).
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
};

struct StepResult {
  float loss = 0.0f;                            // mean cross-entropy over the micro-batch's tokens (nats)
  std::vector<std::int64_t> saved_bytes_per_layer;  // what each layer kept from forward for backward
  std::int64_t saved_bytes_total = 0;           // all of them: the activation memory at the forward→backward turn
};

// Runs every layer of the model over one flat parameter buffer laid out as model_layout() (Note [Flat layout]).
// This is what a sharded executor must reproduce: same kernels, same order, the loss and gradients of the full model.
class ModelRuntime {
 public:
  // InputError when the model is not a llama-family decoder this runtime can execute (decoder_dims,
  // make_layer_kernel).
  explicit ModelRuntime(ModelSpec model, ModelRuntimeOptions options = {});

  const ModelSpec& model() const { return model_; }
  const ModelLayout& layout() const { return layout_; }
  const DecoderDims& dims() const { return dims_; }
  std::int64_t param_count() const { return layout_.element_count; }
  const LayerKernel& kernel(std::size_t layer) const { return *kernels_.at(layer); }
  ActivationCheckpointing checkpointing_for(std::size_t layer) const;

  std::vector<float> init_parameters(std::uint64_t seed) const;

  // Forward only: the mean loss of `batch`.
  float loss(std::span<const float> params, const Batch& batch) const;
  // Forward, then backward with dL/dloss = loss_scale (1/k when accumulating k micro-batches), ADDING the gradient
  // into `grads` (same layout as params; zero it first for a fresh step).
  StepResult forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads,
                              float loss_scale = 1.0f) const;

 private:
  void check_call(std::span<const float> params, const Batch& batch) const;

  ModelSpec model_;
  ModelRuntimeOptions options_;
  DecoderDims dims_;
  ModelLayout layout_;
  std::vector<std::unique_ptr<LayerKernel>> kernels_;
};

}  // namespace shardplan::runtime
