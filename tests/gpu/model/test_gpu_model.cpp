// GPU whole-model tests: every device layer chained forward and backward, as runtime::ModelRuntime does, against
// ModelRuntime's loss and full gradient, tied and untied, with and without biases, under each checkpointing mode.
#include <doctest/doctest.h>

#include <string>

#include "gpu_layer_runs.h"

namespace shardplan::gpu::testing {
namespace {

void check_model(DeviceDType dtype) {
  DeviceEnv env;
  const bool bf16 = dtype == DeviceDType::bf16;
  for (const bool tied : {false, true}) {
    const ModelSpec model = test_model(tied, /*attention_bias=*/tied);
    const runtime::ModelLayout layout = runtime::model_layout(model);
    std::vector<float> params = test_parameters(layout);
    if (bf16) params = rounded_to_bf16(params);
    const runtime::Batch batch = runtime::testing::random_batch(kMicroBatch, kSeqLen, model.vocab_size, 21);
    constexpr float loss_scale = 0.5f;  // as over 2 accumulated micro-batches
    for (const ActivationCheckpointing mode :
         {ActivationCheckpointing::none, ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
      const std::string what = std::string(tied ? "tied+bias" : "untied") + " " + to_string(mode) + " " +
                               to_string(dtype);
      const ModelRun want = run_cpu_model(model, params, batch, mode, loss_scale);
      const ModelRun got = run_device_model(env, model, params, batch, dtype, mode, loss_scale);
      // gpu_model_test_support.h: fp32 to 1e-4; bf16 to 6e-2 per gradient tensor (the loss's softmax amplifies the
      // operand rounding over the whole model) and 1e-2 for the loss.
      if (bf16) {
        check_bf16_close({got.loss}, {want.loss}, what + ": loss", 1e-2);
      } else {
        check_fp32_close({got.loss}, {want.loss}, what + ": loss");
      }
      for (std::size_t index = 0; index < layout.layers.size(); ++index) {
        const auto first = static_cast<std::size_t>(layout.layer_offsets_elements[index]);
        for (const auto& slot : layout.layers[index].tensors) {
          const auto at = static_cast<std::ptrdiff_t>(first + static_cast<std::size_t>(slot.offset_elements));
          const std::vector<float> g(got.grads.begin() + at, got.grads.begin() + at + slot.element_count);
          const std::vector<float> w(want.grads.begin() + at, want.grads.begin() + at + slot.element_count);
          const std::string name = what + ": grad " + model.layers[index].name + "." + slot.name;
          if (bf16) {
            check_bf16_close(g, w, name, 6e-2);
          } else {
            check_fp32_close(g, w, name);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("model: fp32 loss and gradient match ModelRuntime") { check_model(DeviceDType::f32); }

TEST_CASE("model: bf16 loss and gradient match ModelRuntime within bf16 rounding") { check_model(DeviceDType::bf16); }

}  // namespace shardplan::gpu::testing
