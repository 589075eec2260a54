// Tests of models whose blocks differ (issue 17): the wrap search's block cache keys on everything that changes a
// block's cost, not only its parameters and matmul FLOPs; a layer's attention is causal or not on its own.
#include <doctest/doctest.h>

#include "wrap_cases.h"
#include "fragment_cache.h"
#include "pass_kernels.h"
#include "wrap_dp.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

const WrapCase& mixed_case() {
  static const WrapCase c{"tiny-llama-mixed", "8xH100-80GB", "full_shard", ActivationCheckpointing::none, 512};
  return c;
}

CaseWrapping per_block(std::size_t blocks) {
  CaseWrapping wrapping;
  for (std::size_t b = 0; b < blocks; ++b) wrapping.units.push_back({b, 1, false});
  return wrapping;
}

}  // namespace

TEST_CASE("non-uniform blocks: equal parameters and FLOPs, different activations or causality, cached apart") {
  const WrapSetup setup = wrap_setup(mixed_case());
  const ModelSpec uniform = preset_model("tiny-llama");
  const auto& layers = setup.model.layers;
  // Blocks 0, 2 and 3 (layers 1, 3, 4) agree on what the old key read: parameter count and matmul FLOPs.
  REQUIRE(layers[3].param_count() == layers[1].param_count());
  REQUIRE(layers[4].param_count() == layers[1].param_count());
  REQUIRE(layers[3].flops.matmul_flops_per_token == layers[1].flops.matmul_flops_per_token);
  REQUIRE(layers[4].flops.matmul_flops_per_token == layers[1].flops.matmul_flops_per_token);

  // ... yet they lower differently: block 2 keeps more for backward, block 3 does twice the attention work.
  const std::int64_t s = mixed_case().seq_len;
  CHECK(layers[3].activation_bytes_per_token(s, 2, true, ActivationCheckpointing::none) >
        layers[1].activation_bytes_per_token(s, 2, true, ActivationCheckpointing::none));
  CHECK(layers[4].forward_flops_per_token(s, true) > layers[1].forward_flops_per_token(s, true));
  WrapSetup uniform_setup = setup;
  uniform_setup.model = uniform;
  const Simulated mixed_step = simulate_wrapping(setup, per_block(4));
  const Simulated uniform_step = simulate_wrapping(uniform_setup, per_block(4));
  CHECK(mixed_step.peak_bytes > uniform_step.peak_bytes);
  // The kernels the simulator times: the encoder block's flash attention does twice the causal block's work.
  const auto forward = [&](std::size_t layer) {
    return pass_kernels(setup.model, layer, setup.base.training, ComputePass::forward, ActivationCheckpointing::none);
  };
  CHECK(forward(4).attention_flops() == doctest::Approx(2.0 * forward(1).attention_flops()));
  CHECK(forward(4).gemm_flops() == forward(1).gemm_flops());

  // The cache gives each its own signature (a key of parameters and FLOPs would have given blocks 0, 2, 3 one).
  WrapFragments fragments(setup.model, setup.base, setup.profile, setup.cluster.world_size(),
                          setup.cluster.gpus_per_node);
  const auto cache = fragments.cache();
  const auto none = ActivationCheckpointing::none;
  CHECK(cache->signature(1, none) == cache->signature(0, none));
  CHECK(cache->signature(2, none) != cache->signature(0, none));
  CHECK(cache->signature(3, none) != cache->signature(0, none));
  CHECK(cache->signature(3, none) != cache->signature(2, none));

  // And the fragments time and bound the mixed model's step as the simulator does.
  const WrapEvaluation evaluation = evaluate_wrapping(fragments, per_block(4).units);
  if (evaluation.exact) CHECK(evaluation.step_s == doctest::Approx(mixed_step.step_s).epsilon(1e-9));
  CHECK(evaluation.floor_bytes <= mixed_step.peak_bytes);
}

TEST_CASE("non-uniform blocks: causal skipping applies per layer") {
  const ModelSpec model = mixed_tiny_llama();
  const LayerSpec& decoder = model.layers[1];
  const LayerSpec& encoder = model.layers[4];
  const double s = 2048, attention = decoder.flops.attention_flops_per_token_per_position * s;
  // A causal kernel skips the masked half (FlashAttention-2 §3.1) where the layer is causal, never for an encoder.
  CHECK(decoder.forward_flops_per_token(2048, true) == doctest::Approx(decoder.flops.matmul_flops_per_token +
                                                                       0.5 * attention));
  CHECK(encoder.forward_flops_per_token(2048, true) == doctest::Approx(encoder.flops.matmul_flops_per_token +
                                                                       attention));
  CHECK(encoder.forward_flops_per_token(2048, false) == decoder.forward_flops_per_token(2048, false));
}
