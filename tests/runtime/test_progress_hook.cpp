// Note [Progress hook]: a decoder block calls its executor's hook between the parts of each pass, and the hook
// changes no bits of what the block computes.
#include <doctest/doctest.h>

#include <cstring>

#include "layer_kernel.h"
#include "model_runtime.h"
#include "param_init.h"
#include "runtime_fixtures.h"

namespace {

using namespace shardplan;
using namespace shardplan::runtime;
using namespace shardplan::runtime::testing;

struct Pass {
  std::vector<float> output, grad_input, grads;
  int forward_polls = 0, backward_polls = 0;
};

Pass run_block(bool with_hook) {
  const ModelSpec model = tiny_model();
  const std::size_t block = 1;  // model.layers[1] is the first decoder block
  REQUIRE(model.layers[block].kind == LayerKind::transformer_block);
  const auto kernel = make_layer_kernel(model, block);
  const ModelLayout layout = model_layout(model);
  InitOptions init;
  init.seed = 3;
  const std::vector<float> params = init_model_parameters(layout, init);
  std::vector<float> grads(params.size(), 0.0f);
  Activations input = Activations::zeros(2, 5, model.hidden_size);
  input.values = uniform_buffer(input.values.size(), 21, -1.0f, 1.0f);
  Activations grad_output = Activations::zeros(2, 5, model.hidden_size);
  grad_output.values = uniform_buffer(grad_output.values.size(), 22, -1.0f, 1.0f);
  Pass pass;
  int* counter = &pass.forward_polls;
  if (with_hook) kernel->set_progress_hook([&counter] { ++*counter; });
  const LayerParams view = bind_model_layer(layout, block, std::span<const float>(params));
  const LayerForward forward =
      kernel->forward(view, random_batch(2, 5, model.vocab_size, 7), input, ActivationCheckpointing::none);
  counter = &pass.backward_polls;
  const Activations grad_input =
      kernel->backward(view, forward.saved, grad_output, bind_model_layer(layout, block, std::span<float>(grads)));
  pass.output = forward.output.values;
  pass.grad_input = grad_input.values;
  pass.grads = grads;
  return pass;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("progress hook: a decoder block polls between the parts of each pass and computes the same bits") {
  const Pass polled = run_block(true);
  const Pass quiet = run_block(false);
  // Forward: after the q/k/v projections, before o_proj, after attention, between the MLP projections (2).
  CHECK(polled.forward_polls == 5);
  // Backward: after the MLP's down and gate projections, after the MLP, after o_proj's, before q/k/v's.
  CHECK(polled.backward_polls == 5);
  CHECK(quiet.forward_polls == 0);
  CHECK(same_bits(polled.output, quiet.output));
  CHECK(same_bits(polled.grad_input, quiet.grad_input));
  CHECK(same_bits(polled.grads, quiet.grads));
}
