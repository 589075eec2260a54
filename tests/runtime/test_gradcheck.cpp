// Gradient checks: every layer kernel's backward, and the whole model's, against central finite differences.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "finetune_apply.h"
#include "layer_kernel.h"
#include "model_runtime.h"
#include "runtime_fixtures.h"

namespace {

using namespace shardplan;
using namespace shardplan::runtime;
using namespace shardplan::runtime::testing;

// Note [Gradient check tolerance]: central differences (f(x+δ) − f(x−δ)) / 2δ with δ = 1e-2 on fp32 kernels. The
// truncation error is O(δ²·f''') ≈ 1e-4 relative at these O(1) scales; the objective is summed in double from fp32
// outputs whose rounding (~1e-6 absolute) divided by 2δ gives ~1e-4 of noise. So each checked element must satisfy
// |analytic − numeric| ≤ 2e-2·max(|analytic|, |numeric|) + 1e-3 — a 2 % relative error, with an absolute floor for
// elements whose gradient is ~0 (unused embedding rows, masked positions) where a relative test is meaningless.
constexpr float kStep = 1e-2f;
constexpr double kRelTol = 2e-2;
constexpr double kAbsTol = 1e-3;
constexpr std::size_t kElementsPerTensor = 16;

// The largest |analytic − numeric| / tolerance seen by a test case: how much margin the tolerance leaves.
struct Margin {
  double worst = 0.0;
};

bool close_enough(double analytic, double numeric, double abs_tol, Margin& margin) {
  const double tolerance = kRelTol * std::max(std::abs(analytic), std::abs(numeric)) + abs_tol;
  margin.worst = std::max(margin.worst, std::abs(analytic - numeric) / tolerance);
  return std::abs(analytic - numeric) <= tolerance;
}

// Parameters at a scale where every nonlinearity is exercised (softmax not uniform, SiLU not linear): matrices and
// biases uniform in [−0.5, 0.5), norm scales in [0.5, 1.5).
std::vector<float> test_params(const LayerLayout& layout, std::uint64_t seed) {
  std::vector<float> params = uniform_buffer(static_cast<std::size_t>(layout.element_count), seed, -0.5f, 0.5f);
  for (const TensorSlot& slot : layout.tensors) {
    if (slot.shape.size() != 1 || slot.name.ends_with("bias")) continue;
    for (std::int64_t i = 0; i < slot.element_count; ++i) {
      params[static_cast<std::size_t>(slot.offset_elements + i)] += 1.0f;
    }
  }
  return params;
}

// One layer of the tiny model with random parameters, input and output projection R: the checked objective is
// Σ output ⊙ R, whose gradient with respect to the output is R (a scalar 1.7 for the loss layer).
struct LayerCase {
  std::unique_ptr<LayerKernel> kernel;
  LayerLayout layout;
  std::vector<float> params;
  Batch batch;
  Activations input;
  Activations projection;

  LayerCase(const ModelSpec& model, std::size_t index) {
    kernel = make_layer_kernel(model, index);
    layout = layer_layout(model.layers[index]);
    params = test_params(layout, 11 + index);
    const DecoderDims dims = decoder_dims(model);
    batch = random_batch(2, 5, dims.vocab_size, 3);
    if (kernel->kind() != LayerKind::embedding) {
      input = Activations::zeros(2, 5, dims.hidden_size);
      input.values = uniform_buffer(input.values.size(), 5, -1.0f, 1.0f);
    }
    if (kernel->kind() == LayerKind::lm_head) {
      projection = Activations::scalar(1.7f);
    } else {
      projection = Activations::zeros(2, 5, kernel->output_width());
      projection.values = uniform_buffer(projection.values.size(), 7, -1.0f, 1.0f);
    }
  }

  double objective() const {
    const LayerForward result = kernel->forward(bind_layer(layout, std::span<const float>(params)), batch, input,
                                                ActivationCheckpointing::none);
    double sum = 0.0;
    for (std::size_t i = 0; i < result.output.values.size(); ++i) {
      sum += static_cast<double>(result.output.values[i]) * projection.values[i];
    }
    return sum;
  }

  // Central difference of the objective in *value (a parameter or input element), restoring it afterwards.
  double numeric_derivative(float* value) {
    const float original = *value;
    *value = original + kStep;
    const double plus = objective();
    *value = original - kStep;
    const double minus = objective();
    *value = original;
    return (plus - minus) / (2.0 * static_cast<double>(kStep));
  }
};

// Checks a random subset of every parameter tensor and of the input gradient; returns how many elements it checked.
int check_layer_gradients(LayerCase& c) {
  const LayerForward forward = c.kernel->forward(bind_layer(c.layout, std::span<const float>(c.params)), c.batch,
                                                 c.input, ActivationCheckpointing::none);
  std::vector<float> grads(static_cast<std::size_t>(c.layout.element_count), 0.0f);
  const Activations grad_input = c.kernel->backward(bind_layer(c.layout, std::span<const float>(c.params)),
                                                    forward.saved, c.projection,
                                                    bind_layer(c.layout, std::span(grads)));
  int checked = 0;
  Margin margin;
  for (const TensorSlot& slot : c.layout.tensors) {
    for (std::size_t i : sample_indices(static_cast<std::size_t>(slot.element_count), kElementsPerTensor, 17)) {
      const auto at = static_cast<std::size_t>(slot.offset_elements) + i;
      const double numeric = c.numeric_derivative(&c.params[at]);
      CHECK_MESSAGE(close_enough(grads[at], numeric, kAbsTol, margin), std::string(c.kernel->kernel_name()), " ",
                    slot.name, "[", i, "]: analytic ", grads[at], " numeric ", numeric);
      ++checked;
    }
  }
  if (c.kernel->kind() != LayerKind::embedding) {
    REQUIRE(grad_input.values.size() == c.input.values.size());
    for (std::size_t i : sample_indices(c.input.values.size(), 2 * kElementsPerTensor, 19)) {
      const double numeric = c.numeric_derivative(&c.input.values[i]);
      CHECK_MESSAGE(close_enough(grad_input.values[i], numeric, kAbsTol, margin),
                    std::string(c.kernel->kernel_name()), " input[", i, "]: analytic ", grad_input.values[i],
                    " numeric ", numeric);
      ++checked;
    }
  } else {
    CHECK(grad_input.values.empty());
  }
  MESSAGE(std::string(c.kernel->kernel_name()), ": ", checked, " elements checked, worst error ", margin.worst,
          " of the tolerance");
  return checked;
}

}  // namespace

TEST_CASE("embedding backward matches finite differences (repeated tokens sum their rows)") {
  LayerCase c(tiny_model(), 0);
  CHECK(check_layer_gradients(c) > 0);
}

TEST_CASE("decoder block backward matches finite differences: GQA, RoPE, SwiGLU, both RMSNorms") {
  LayerCase c(tiny_model(), 1);
  CHECK(check_layer_gradients(c) > 100);
}

TEST_CASE("decoder block backward matches finite differences with q/k/v biases (Qwen2 style)") {
  LayerCase c(tiny_model(false, true), 1);
  CHECK(c.layout.find("self_attn.k_proj.bias") != nullptr);
  CHECK(check_layer_gradients(c) > 100);
}

TEST_CASE("decoder block backward matches finite differences with plain multi-head attention") {
  DecoderArchitecture arch = tiny_architecture();
  arch.num_kv_heads = arch.num_heads;
  LayerCase c(build_decoder("tiny-mha", arch, "test"), 1);
  CHECK(check_layer_gradients(c) > 100);
}

// Note [LoRA projection] (executor/runtime/projection.h): the adapters' forward and backward in every projection, with
// B non-zero (test_params) and scaling alpha/r = 0.5 so a scaling missing from either pass shows. A step δ in a B
// element moves the projection by scaling·u·δ with u = x·Aᵀ summed over the hidden size (|u| up to ~2 here): at
// scaling 3 that is ~6x a base weight's step and the central difference's truncation error passed the 2 % tolerance
// on 2 of 16 k_proj.lora_B elements (they agreed at δ = 3e-3, where fp32 noise then failed others); 0.5 keeps it near
// a base weight's. The MPI reference shares these kernels, so this is what checks LoRA's gradients themselves.
// Mutation tried: the scaling left out of projection_backward's dz — 374 of the 407 checks fail (worst 81x the
// tolerance).
TEST_CASE("decoder block backward matches finite differences with LoRA adapters on every projection") {
  FinetuneConfig lora;
  lora.mode = FinetuneMode::lora;
  lora.lora.r = 2;
  lora.lora.alpha = 1;
  lora.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  const ModelSpec model = finetuned_model(tiny_model(), lora, FinetuneFieldNames::cli());
  CHECK(decoder_dims(model).lora_scaling == 0.5);
  LayerCase c(model, 1);
  for (const char* adapter : {"self_attn.q_proj.lora_A.weight", "self_attn.o_proj.lora_B.weight",
                              "mlp.down_proj.lora_A.weight", "mlp.gate_proj.lora_B.weight"}) {
    CHECK(c.layout.find(adapter) != nullptr);
  }
  CHECK(check_layer_gradients(c) > 200);
}

TEST_CASE("final RMSNorm backward matches finite differences") {
  const ModelSpec model = tiny_model();
  LayerCase c(model, model.layers.size() - 2);
  REQUIRE(c.kernel->kind() == LayerKind::norm);
  CHECK(check_layer_gradients(c) > 0);
}

TEST_CASE("LM head + cross-entropy backward matches finite differences, scaled by dL/dloss") {
  const ModelSpec model = tiny_model();
  LayerCase c(model, model.layers.size() - 1);
  REQUIRE(c.kernel->kind() == LayerKind::lm_head);
  CHECK(check_layer_gradients(c) > 0);
}

TEST_CASE("whole model with tied embeddings: the flat gradient matches finite differences of the loss") {
  // Tied: the lm_head reads and accumulates into the embedding's slice, so its elements get both contributions.
  const ModelRuntime runtime(tiny_model(true));
  REQUIRE(runtime.layout().layers.back().element_count == 0);
  std::vector<float> params(static_cast<std::size_t>(runtime.param_count()));
  for (std::size_t layer = 0; layer < runtime.layout().layers.size(); ++layer) {
    const LayerLayout& layout = runtime.layout().layers[layer];
    const std::vector<float> values = test_params(layout, 100 + layer);
    std::copy(values.begin(), values.end(), params.begin() + runtime.layout().layer_offsets_elements[layer]);
  }
  const Batch batch = random_batch(2, 5, runtime.dims().vocab_size, 23);
  std::vector<float> grads(params.size(), 0.0f);
  runtime.forward_backward(params, batch, grads);
  // The mean loss's gradients are ~1/tokens of a layer's: a 1e-4 absolute floor (noise ≈ 3e-5, measured).
  int checked = 0;
  Margin margin;
  for (std::size_t layer = 0; layer < runtime.layout().layers.size(); ++layer) {
    for (const TensorSlot& slot : runtime.layout().layers[layer].tensors) {
      for (std::size_t i : sample_indices(static_cast<std::size_t>(slot.element_count), 4, 29 + layer)) {
        const auto at = static_cast<std::size_t>(runtime.layout().layer_offsets_elements[layer] +
                                                 slot.offset_elements) + i;
        const float original = params[at];
        params[at] = original + kStep;
        const double plus = runtime.loss(params, batch);
        params[at] = original - kStep;
        const double minus = runtime.loss(params, batch);
        params[at] = original;
        const double numeric = (plus - minus) / (2.0 * static_cast<double>(kStep));
        CHECK_MESSAGE(close_enough(grads[at], numeric, 1e-4, margin), runtime.model().layers[layer].name, ".",
                      slot.name, "[", i, "]: analytic ", grads[at], " numeric ", numeric);
        ++checked;
      }
    }
  }
  MESSAGE("whole model: ", checked, " elements checked, worst error ", margin.worst, " of the tolerance");
  CHECK(checked > 40);
}
