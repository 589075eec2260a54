// ModelRuntime: forward through every layer to the loss, backward through every layer to the model's flat gradient.
#include "model_runtime.h"

#include "errors.h"

namespace shardplan::runtime {

ModelRuntime::ModelRuntime(ModelSpec model, ModelRuntimeOptions options)
    : model_(std::move(model)), options_(options), dims_(decoder_dims(model_)), layout_(model_layout(model_)) {
  for (std::size_t index = 0; index < model_.layers.size(); ++index) {
    kernels_.push_back(make_layer_kernel(model_, index));
  }
  if (kernels_.empty() || kernels_.front()->kind() != LayerKind::embedding ||
      kernels_.back()->kind() != LayerKind::lm_head) {
    throw InputError("model '" + model_.name + "': expected the embedding first and the lm_head last");
  }
}

ActivationCheckpointing ModelRuntime::checkpointing_for(std::size_t layer) const {
  return kernels_.at(layer)->kind() == LayerKind::transformer_block ? options_.checkpointing
                                                                    : ActivationCheckpointing::none;
}

std::vector<float> ModelRuntime::init_parameters(std::uint64_t seed) const {
  InitOptions init;
  init.seed = seed;
  return init_model_parameters(layout_, init);
}

void ModelRuntime::check_call(std::span<const float> params, const Batch& batch) const {
  if (static_cast<std::int64_t>(params.size()) != layout_.element_count) {
    throw InternalError("parameter buffer holds " + std::to_string(params.size()) + " floats, model '" +
                        model_.name + "' has " + std::to_string(layout_.element_count));
  }
  if (batch.seq_len > dims_.max_positions) {
    throw InputError("batch: seq_len " + std::to_string(batch.seq_len) + " exceeds the model's " +
                     std::to_string(dims_.max_positions) + " positions");
  }
}

float ModelRuntime::loss(std::span<const float> params, const Batch& batch) const {
  check_call(params, batch);
  Activations hidden;
  for (std::size_t index = 0; index < kernels_.size(); ++index) {
    const LayerParams view = bind_model_layer(layout_, index, params);
    // Nothing is kept across layers: each layer's saved state dies with its LayerForward.
    hidden = kernels_[index]->forward(view, batch, hidden, ActivationCheckpointing::none).output;
  }
  return hidden.values.at(0);
}

StepResult ModelRuntime::forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads,
                                          float loss_scale) const {
  check_call(params, batch);
  if (grads.size() != params.size()) throw InternalError("gradient buffer size differs from the parameter buffer");
  std::vector<SavedActivations> saved;
  saved.reserve(kernels_.size());
  Activations hidden;
  StepResult result;
  for (std::size_t index = 0; index < kernels_.size(); ++index) {
    LayerForward step = kernels_[index]->forward(bind_model_layer(layout_, index, params), batch, hidden,
                                                 checkpointing_for(index));
    hidden = std::move(step.output);
    result.saved_bytes_per_layer.push_back(step.saved.bytes());
    result.saved_bytes_total += step.saved.bytes();
    saved.push_back(std::move(step.saved));
  }
  result.loss = hidden.values.at(0);

  Activations grad = Activations::scalar(loss_scale);
  for (std::size_t index = kernels_.size(); index-- > 0;) {
    // A tied lm_head binds its owner's slice of `grads`: its gradient adds into the embedding's
    // (Note [Flat layout]).
    grad = kernels_[index]->backward(bind_model_layer(layout_, index, params), saved[index], grad,
                                     bind_model_layer(layout_, index, grads));
    saved[index] = SavedActivations();  // free as soon as the layer is done, as an executor would
  }
  return result;
}

}  // namespace shardplan::runtime
