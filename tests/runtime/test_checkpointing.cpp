// Bitwise reproducibility: checkpointed recompute, buffers at any address; saved activation bytes as documented.
#include <doctest/doctest.h>

#include <cstring>

#include "layer_kernel.h"
#include "model_presets.h"
#include "model_runtime.h"
#include "param_init.h"
#include "runtime_fixtures.h"

namespace {

using namespace shardplan;
using namespace shardplan::runtime;
using namespace shardplan::runtime::testing;

struct Outcome {
  Activations output;
  std::int64_t saved_bytes = 0;
  Activations grad_input;
  std::vector<float> grads;
};

// Runs one layer of `model` forward and backward. The parameters and gradients live `offset_floats` into their
// buffers, as a layer does inside an FSDP unit's flat parameter.
Outcome run_layer(const ModelSpec& model, std::size_t index, ActivationCheckpointing mode,
                  std::size_t offset_floats = 0) {
  const auto kernel = make_layer_kernel(model, index);
  const ModelLayout layout = model_layout(model);
  InitOptions init;
  init.seed = 5;
  init.matrix_std = 0.3;  // large enough that every nonlinearity matters
  std::vector<float> params = init_model_parameters(layout, init);
  params.insert(params.begin(), offset_floats, 0.0f);
  const Batch batch = random_batch(2, 5, model.vocab_size, 9);
  Activations input;
  if (kernel->kind() != LayerKind::embedding) {
    input = Activations::zeros(2, 5, model.hidden_size);
    input.values = uniform_buffer(input.values.size(), 13, -1.0f, 1.0f);
  }
  Activations grad_output = kernel->kind() == LayerKind::lm_head ? Activations::scalar(1.0f)
                                                                 : Activations::zeros(2, 5, kernel->output_width());
  if (kernel->kind() != LayerKind::lm_head) grad_output.values = uniform_buffer(grad_output.values.size(), 15, -1, 1);

  const LayerParams view = bind_model_layer(layout, index, std::span<const float>(params).subspan(offset_floats));
  LayerForward forward = kernel->forward(view, batch, input, mode);
  Outcome outcome;
  outcome.saved_bytes = forward.saved.bytes();
  std::vector<float> grads(params.size(), 0.0f);
  const LayerParams grad_view = bind_model_layer(layout, index, std::span<float>(grads).subspan(offset_floats));
  outcome.grad_input = kernel->backward(view, forward.saved, grad_output, grad_view);
  outcome.grads.assign(grads.begin() + static_cast<std::ptrdiff_t>(offset_floats), grads.end());
  outcome.output = std::move(forward.output);
  return outcome;
}

// Empty vectors may hold null data(), and memcmp's pointers must be valid even for 0 bytes (C11 7.24.1p2; UBSan
// reported it here): compare only what exists.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("every kernel: checkpointed forward + recompute gives bitwise-identical outputs and gradients") {
  const ModelSpec model = tiny_model();
  for (std::size_t index = 0; index < model.layers.size(); ++index) {
    CAPTURE(model.layers[index].name);
    const Outcome plain = run_layer(model, index, ActivationCheckpointing::none);
    for (auto mode : {ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
      CAPTURE(to_string(mode));
      const Outcome checkpointed = run_layer(model, index, mode);
      CHECK(same_bits(plain.output.values, checkpointed.output.values));
      CHECK(same_bits(plain.grad_input.values, checkpointed.grad_input.values));
      CHECK(same_bits(plain.grads, checkpointed.grads));
    }
  }
}

TEST_CASE("every kernel: the same bits whatever the parameter and gradient buffers' alignment") {
  // Note [Deterministic reductions]: a layer inside a unit's flat parameter starts at any float offset.
  // Tiny dims take Eigen's coefficient-based product path, tiny-llama's its blocked GEMM: both must hold.
  for (const ModelSpec& model : {tiny_model(false, true), preset_model("tiny-llama")}) {
    for (std::size_t index = 0; index < model.layers.size(); ++index) {
      CAPTURE(model.layers[index].name);
      const Outcome aligned = run_layer(model, index, ActivationCheckpointing::none);
      for (std::size_t offset : {1, 2, 3, 5}) {
        CAPTURE(offset);
        const Outcome shifted = run_layer(model, index, ActivationCheckpointing::none, offset);
        CHECK(same_bits(aligned.output.values, shifted.output.values));
        CHECK(same_bits(aligned.grad_input.values, shifted.grad_input.values));
        CHECK(same_bits(aligned.grads, shifted.grads));
      }
    }
  }
}

TEST_CASE("saved activation bytes: positive for every kernel, full < selective < none for a decoder block") {
  const ModelSpec model = tiny_model();
  for (std::size_t index = 0; index < model.layers.size(); ++index) {
    CAPTURE(model.layers[index].name);
    CHECK(run_layer(model, index, ActivationCheckpointing::none).saved_bytes > 0);
  }
  const std::int64_t none = run_layer(model, 1, ActivationCheckpointing::none).saved_bytes;
  const std::int64_t selective = run_layer(model, 1, ActivationCheckpointing::selective).saved_bytes;
  const std::int64_t full = run_layer(model, 1, ActivationCheckpointing::full).saved_bytes;
  CHECK(full < selective);
  CHECK(selective < none);
  // Full keeps exactly the block input, 4 bytes × tokens × hidden (Korthikanti et al. 2022's 2sbh in fp32).
  CHECK(full == 4 * 2 * 5 * model.hidden_size);
  // Selective drops exactly the softmax probabilities: 4 bytes × b × heads × s².
  CHECK(none - selective == 4 * 2 * 4 * 5 * 5);
  // None keeps what LayerSpec::activations counts for the block (6h + 2kv + 4f per token) plus 1/rms twice.
  const auto& arch = *model.architecture;
  const std::int64_t per_token = 6 * arch.hidden_size + 2 * arch.kv_dim() + 4 * arch.intermediate_size + 2;
  CHECK(selective == 4 * 2 * 5 * per_token);
}

TEST_CASE("ModelRuntime: checkpointed blocks give the same loss and gradient bits and keep fewer bytes") {
  const ModelSpec model = tiny_model();
  const Batch batch = random_batch(2, 5, model.vocab_size, 21);
  std::vector<float> reference_grads;
  float reference_loss = 0.0f;
  std::int64_t previous_bytes = 0;
  for (auto mode : {ActivationCheckpointing::none, ActivationCheckpointing::selective,
                    ActivationCheckpointing::full}) {
    CAPTURE(to_string(mode));
    const ModelRuntime runtime(model, {mode});
    const std::vector<float> params = runtime.init_parameters(3);
    std::vector<float> grads(params.size(), 0.0f);
    const StepResult step = runtime.forward_backward(params, batch, grads);
    if (mode == ActivationCheckpointing::none) {
      reference_grads = grads;
      reference_loss = step.loss;
    } else {
      CHECK(std::memcmp(&step.loss, &reference_loss, sizeof(float)) == 0);
      CHECK(same_bits(grads, reference_grads));
      CHECK(step.saved_bytes_total < previous_bytes);
    }
    previous_bytes = step.saved_bytes_total;
    CHECK(step.saved_bytes_per_layer.size() == model.layers.size());
  }
}

TEST_CASE("backward adds into the gradient buffer: two backwards give twice one") {
  const ModelRuntime runtime(tiny_model());
  const std::vector<float> params = runtime.init_parameters(4);
  const Batch batch = random_batch(2, 5, runtime.dims().vocab_size, 22);
  std::vector<float> once(params.size(), 0.0f), twice(params.size(), 0.0f);
  runtime.forward_backward(params, batch, once);
  runtime.forward_backward(params, batch, twice, 0.5f);
  runtime.forward_backward(params, batch, twice, 1.5f);
  for (std::size_t i = 0; i < once.size(); ++i) {
    REQUIRE(twice[i] == doctest::Approx(2.0 * once[i]).epsilon(1e-4).scale(1e-3));
  }
}
