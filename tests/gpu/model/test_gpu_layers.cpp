// GPU layer tests: every device layer against its CPU runtime kernel (executor/runtime/), from the same parameters
// and inputs, with fp32 and bf16 parameters and under each activation checkpointing mode.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "errors.h"
#include "gpu_layer_runs.h"

namespace shardplan::gpu::testing {
namespace {

constexpr ActivationCheckpointing kModes[] = {ActivationCheckpointing::none, ActivationCheckpointing::selective,
                                              ActivationCheckpointing::full};

// Llama (no biases) and Qwen2-style q/k/v biases, untied (the tied lm_head is in the whole-model tests).
std::vector<ModelSpec> layer_models() { return {test_model(false, false), test_model(false, true)}; }

std::string describe(const LayerCase& c, ActivationCheckpointing mode) {
  return std::string(c.model.architecture->attention_bias ? "bias " : "") + c.model.layers[c.index].name + " (" +
         to_string(mode) + ")";
}

// Output, input gradient and each parameter tensor's gradient, with the fp32 or the bf16 tolerance
// (gpu_model_test_support.h); the loss, one number averaged over every token where rounding errors largely cancel,
// to 1e-2 in bf16.
void check_against_cpu(const LayerCase& c, const LayerRun& got, const LayerRun& want, bool bf16,
                       const std::string& what) {
  const auto close = [&](const std::vector<float>& g, const std::vector<float>& w, const std::string& name,
                         double bf16_rel = 3e-2) {
    if (bf16) {
      check_bf16_close(g, w, what + ": " + name, bf16_rel);
    } else {
      check_fp32_close(g, w, what + ": " + name);
    }
  };
  close(got.output, want.output, c.is_loss() ? "loss" : "output", c.is_loss() ? 1e-2 : 3e-2);
  close(got.grad_input, want.grad_input, "grad_input");
  for (const auto& slot : c.owner_layout().tensors) {
    close(tensor_of(got.grads, slot), tensor_of(want.grads, slot), "grad " + slot.name);
  }
}

// Note [Recompute is bitwise]: selective checkpointing rebuilds the probabilities with the forward's own kernel, and
// full checkpointing reruns the whole forward with the same kernels and GEMMs on the same stream (cuBLAS is
// bitwise reproducible for one configuration, cuBLAS guide "Results reproducibility"), so both must give the bits of
// the un-checkpointed run. The one exception is the embedding's gradient: its atomicAdd sums the rows of a token
// repeated three or more times in any order (Note [Embedding scatter]), so it is left to the tolerance check.
void check_same_as_plain(const LayerCase& c, const LayerRun& checkpointed, const LayerRun& plain,
                         const std::string& what) {
  CHECK_MESSAGE(same_bits(checkpointed.output, plain.output), what << ": output differs from the plain run");
  CHECK_MESSAGE(same_bits(checkpointed.grad_input, plain.grad_input), what << ": grad_input differs");
  if (c.model.layers[c.index].kind != LayerKind::embedding) {
    CHECK_MESSAGE(same_bits(checkpointed.grads, plain.grads), what << ": parameter gradients differ");
  }
}

void check_layers(DeviceDType dtype) {
  DeviceEnv env;
  const bool bf16 = dtype == DeviceDType::bf16;
  for (const ModelSpec& model : layer_models()) {
    for (std::size_t index = 0; index < model.layers.size(); ++index) {
      const LayerCase c = make_layer_case(model, index, bf16);
      // The CPU kernels give the same bits in every mode (tests/runtime/test_checkpointing.cpp): one reference.
      const LayerRun want = run_cpu(c, ActivationCheckpointing::none);
      const LayerRun plain = run_device(env, c, dtype, ActivationCheckpointing::none);
      for (const ActivationCheckpointing mode : kModes) {
        const std::string what = describe(c, mode) + " " + to_string(dtype);
        const LayerRun got = mode == ActivationCheckpointing::none ? plain : run_device(env, c, dtype, mode);
        check_against_cpu(c, got, want, bf16, what);
        if (mode != ActivationCheckpointing::none) check_same_as_plain(c, got, plain, what);
      }
      if (bf16 && model.layers[index].kind == LayerKind::embedding) {
        // The gather of a bf16 table converts exactly: the rows are the CPU's, bit for bit.
        CHECK(same_bits(plain.output, want.output));
      }
    }
  }
}

}  // namespace

TEST_CASE("layers: fp32 parameters match the CPU runtime") { check_layers(DeviceDType::f32); }

TEST_CASE("layers: bf16 parameters match the CPU runtime within bf16 rounding") { check_layers(DeviceDType::bf16); }

TEST_CASE("layers: saved tensors match the CPU runtime except the batch ids") {
  DeviceEnv env;
  for (const ModelSpec& model : layer_models()) {
    for (std::size_t index = 0; index < model.layers.size(); ++index) {
      const LayerCase c = make_layer_case(model, index, false);
      for (const ActivationCheckpointing mode : kModes) {
        CAPTURE(describe(c, mode));
        LayerRun want = run_cpu(c, mode);
        LayerRun got = run_device(env, c, DeviceDType::f32, mode);
        std::sort(want.saved_names.begin(), want.saved_names.end());
        std::sort(got.saved_names.begin(), got.saved_names.end());
        CHECK(got.saved_names == want.saved_names);
        // The CPU also counts the token ids the embedding and the loss keep; on the device they are the runner's.
        const LayerKind kind = model.layers[index].kind;
        const bool keeps_ids = kind == LayerKind::embedding || kind == LayerKind::lm_head;
        const std::int64_t id_bytes = keeps_ids ? c.batch.token_count() * std::int64_t{sizeof(std::int32_t)} : 0;
        CHECK(got.saved_bytes == want.saved_bytes - id_bytes);
      }
    }
  }
}

TEST_CASE("layers: recompute rebuilds the complete saved state of a fully checkpointed block") {
  DeviceEnv env;
  const ModelSpec model = test_model(false, true);
  for (const DeviceDType dtype : {DeviceDType::f32, DeviceDType::bf16}) {
    CAPTURE(to_string(dtype));
    const LayerCase c = make_layer_case(model, 1, dtype == DeviceDType::bf16);
    REQUIRE(model.layers[1].kind == LayerKind::transformer_block);
    const LayerRun plain = run_device(env, c, dtype, ActivationCheckpointing::none);
    {
      const DeviceModel device(env, c.params, dtype, c.grad_prefill, c.batch);
      const auto layer = make_device_layer(model, 1);
      const DeviceContext context = env.context();
      const DeviceLayerParams params = device.layer_params(c.layout, 1);
      DeviceLayerForward forward = layer->forward(context, params, device.batch(c.batch),
                                                  env.upload_activations(c.input), ActivationCheckpointing::full);
      CHECK(forward.saved.names().empty());
      CHECK(forward.saved.bytes() == forward.saved.input.buffer.bytes());
      const DeviceSaved complete = layer->recompute(context, params, forward.saved);
      CHECK(complete.checkpointing == ActivationCheckpointing::none);
      CHECK(complete.has("attn.probs"));
      CHECK(complete.bytes() == plain.saved_bytes);
      // An executor that schedules recompute as its own op: backward then reads the complete state as it is.
      const DeviceActivations grad_input = layer->backward(context, params, complete,
                                                           env.upload_activations(c.grad_output),
                                                           device.layer_grads(c.layout, 1));
      CHECK(same_bits(env.download(forward.output), plain.output));
      CHECK(same_bits(env.download(grad_input), plain.grad_input));
      CHECK(same_bits(added_gradient(c, env.download<float>(device.grads.data(),
                                                            static_cast<std::int64_t>(c.params.size()))),
                      plain.grads));
    }
    env.sync();
    CHECK(env.bytes(MemoryCategory::activations) == 0);
  }
}

TEST_CASE("layers: make_device_layer builds each kind and refuses what the CPU runtime refuses") {
  const ModelSpec model = test_model(true, false);
  for (std::size_t index = 0; index < model.layers.size(); ++index) {
    const auto device = make_device_layer(model, index);
    const auto cpu = runtime::make_layer_kernel(model, index);
    CHECK(device->kind() == model.layers[index].kind);
    CHECK(std::string(device->kernel_name()) == cpu->kernel_name());
    CHECK(device->output_width() == cpu->output_width());
  }
  CHECK_THROWS_AS(make_device_layer(model, model.layers.size()), InternalError);
  ModelSpec explicit_layers = model;
  explicit_layers.architecture.reset();
  CHECK_THROWS_AS(make_device_layer(explicit_layers, 0), InputError);
  ModelSpec reshaped = model;
  reshaped.layers[1].tensors[1].shape = {kHidden, kHidden + 1};
  CHECK_THROWS_AS(make_device_layer(reshaped, 1), InputError);
}

}  // namespace shardplan::gpu::testing
