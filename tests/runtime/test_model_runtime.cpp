// ModelRuntime on the tiny-llama preset: layout, init, loss at init, training with AdamW, determinism, refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "adamw.h"
#include "byte_text_dataset.h"
#include "case_skip.h"
#include "errors.h"
#include "model_presets.h"
#include "model_runtime.h"
#include "param_init.h"
#include "runtime_fixtures.h"

namespace {

using namespace shardplan;
using namespace shardplan::runtime;
using namespace shardplan::runtime::testing;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("the flat layout follows the LayerSpec tensors in order, layer after layer") {
  const ModelSpec model = preset_model("tiny-llama");
  const ModelLayout layout = model_layout(model);
  CHECK(layout.element_count == model.param_count());
  std::int64_t expected_offset = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    CHECK(layout.layer_offsets_elements[layer] == expected_offset);
    std::int64_t inner = 0;
    for (std::size_t t = 0; t < model.layers[layer].tensors.size(); ++t) {
      const TensorSlot& slot = layout.layers[layer].tensors[t];
      CHECK(slot.name == model.layers[layer].tensors[t].name);
      CHECK(slot.shape == model.layers[layer].tensors[t].shape);
      CHECK(slot.offset_elements == inner);
      inner += slot.element_count;
    }
    expected_offset += inner;
  }
  // The block's q_proj starts right after input_layernorm's hidden_size scales.
  CHECK(layout.layers[1].find("self_attn.q_proj.weight")->offset_elements == model.hidden_size);
}

TEST_CASE("a unit's flat parameter: its layers concatenated; a tied lm_head reads its owner inside the unit") {
  const ModelRuntime runtime(tiny_model(true));
  const ModelLayout& model = runtime.layout();
  const std::vector<float> whole = runtime.init_parameters(8);
  // The root unit of a per-block wrapping: embedding, final norm and (tied) lm_head — not adjacent in the model.
  const std::size_t norm = model.layers.size() - 2, head = model.layers.size() - 1;
  const UnitParamLayout root = unit_param_layout(model, {0, norm, head});
  CHECK(root.element_count == model.layers[0].element_count + model.layers[norm].element_count);
  std::vector<float> gathered;
  for (const std::size_t layer : root.layers) {
    const auto begin = whole.begin() + model.layer_offsets_elements[layer];
    gathered.insert(gathered.end(), begin, begin + model.layers[layer].element_count);
  }
  const std::span<const float> unit(gathered);
  CHECK(bind_unit_layer(model, root, head, unit).tensor("weight") == gathered.data());
  CHECK(bind_unit_layer(model, root, norm, unit).tensor("weight") ==
        gathered.data() + model.layers[0].element_count);
  CHECK(*bind_unit_layer(model, root, norm, unit).tensor("weight") == 1.0f);
  // Same layer views, same kernel: the unit's lm_head loss equals the reference model's.
  const Batch batch = random_batch(2, 5, 32, 4);
  const auto& kernel = runtime.kernel(head);
  Activations hidden = Activations::zeros(2, 5, 16);
  hidden.values = uniform_buffer(hidden.values.size(), 3, -1.0f, 1.0f);
  const float from_unit =
      kernel.forward(bind_unit_layer(model, root, head, unit), batch, hidden, ActivationCheckpointing::none)
          .output.values[0];
  const float from_model = kernel.forward(bind_model_layer(model, head, std::span<const float>(whole)), batch, hidden,
                                          ActivationCheckpointing::none)
                               .output.values[0];
  CHECK(from_unit == from_model);
  // A tied layer without its owner cannot be bound.
  CHECK_THROWS_AS(unit_param_layout(model, {norm, head}), InternalError);
}

TEST_CASE("init depends only on (seed, element index): any slice equals that slice of the whole") {
  const ModelRuntime runtime(preset_model("tiny-llama"));
  const std::vector<float> whole = runtime.init_parameters(42);
  CHECK(same_bits(whole, runtime.init_parameters(42)));
  CHECK_FALSE(same_bits(whole, runtime.init_parameters(43)));
  InitOptions init;
  init.seed = 42;
  // Odd slice boundaries crossing tensor and layer boundaries, as uneven FSDP shards do.
  for (auto [begin, count] : {std::pair<std::int64_t, std::size_t>{0, 129}, {32767, 1000}, {100001, 77777}}) {
    std::vector<float> slice(count);
    init_parameters(runtime.layout(), init, begin, slice);
    CHECK(std::memcmp(slice.data(), whole.data() + begin, count * sizeof(float)) == 0);
  }
  // Norm scales are ones; matrices have mean ~0 and std ~0.02.
  CHECK(whole[static_cast<std::size_t>(runtime.layout().layer_offsets_elements[1])] == 1.0f);
  const LayerLayout& block = runtime.layout().layers[1];
  const TensorSlot* q = block.find("self_attn.q_proj.weight");
  double sum = 0, sum_sq = 0;
  for (std::int64_t i = 0; i < q->element_count; ++i) {
    const double value = whole[static_cast<std::size_t>(runtime.layout().layer_offsets_elements[1] +
                                                        q->offset_elements + i)];
    sum += value;
    sum_sq += value * value;
  }
  const double n = static_cast<double>(q->element_count);
  CHECK(std::abs(sum / n) < 1e-3);
  CHECK(std::sqrt(sum_sq / n) == doctest::Approx(0.02).epsilon(0.03));
  CHECK(counter_normal(7, 3) == counter_normal(7, 3));
}

TEST_CASE("tiny-llama at init: loss ≈ ln(vocab); AdamW on a fixed batch lowers it; runs are bit-identical") {
  const ModelRuntime runtime(preset_model("tiny-llama"));
  CHECK(runtime.dims().vocab_size == 256);
  CHECK(runtime.dims().hidden_size == 128);
  const Batch batch = random_batch(2, 32, 256, 77);
  std::vector<float> params = runtime.init_parameters(1);
  const float initial_loss = runtime.loss(params, batch);
  MESSAGE("tiny-llama loss at init: ", initial_loss, " (ln 256 = ", std::log(256.0), ")");
  CHECK(std::abs(initial_loss - std::log(256.0)) < 0.1 * std::log(256.0));

  const auto train = [&](std::vector<float> weights, int steps, std::vector<float>& last_grads) {
    std::vector<float> m(weights.size(), 0.0f), v(weights.size(), 0.0f);
    std::vector<float> losses;
    AdamWOptions adamw;
    adamw.learning_rate = 1e-3;
    for (int step = 1; step <= steps; ++step) {
      last_grads.assign(weights.size(), 0.0f);
      losses.push_back(runtime.forward_backward(weights, batch, last_grads).loss);
      adamw_step(weights, last_grads, m, v, step, adamw);
    }
    losses.push_back(runtime.loss(weights, batch));
    return losses;
  };
  std::vector<float> grads_a, grads_b;
  const std::vector<float> losses = train(params, 5, grads_a);
  MESSAGE("losses over 5 AdamW steps: ", losses[0], " ", losses[1], " ", losses[2], " ", losses[3], " ", losses[4],
          " ", losses[5]);
  CHECK(losses.front() == initial_loss);
  CHECK(losses.back() < initial_loss - 0.1f);
  for (std::size_t i = 1; i < losses.size(); ++i) CHECK(losses[i] < losses[i - 1]);
  // Determinism: the same run again, bit for bit (losses and the last step's gradients).
  const std::vector<float> again = train(params, 5, grads_b);
  CHECK(same_bits(losses, again));
  CHECK(same_bits(grads_a, grads_b));
}

TEST_CASE("tiny-llama learns real text: GPL-3 batches from ByteTextDataset"
          * doctest::test_suite("gpl-text")) {
  ByteTextDatasetOptions options;
  options.micro_batch = 2;
  options.seq_len = 32;
  options.seed = 3;
  if (!std::filesystem::exists(options.path)) SKIP_CASE(options.path + " is missing (Debian's base-files has it)");
  ByteTextDataset dataset(options);
  const ModelRuntime runtime(preset_model("tiny-llama"));
  std::vector<float> params = runtime.init_parameters(2);
  std::vector<float> m(params.size(), 0.0f), v(params.size(), 0.0f), grads(params.size());
  const Batch held_out = dataset.batch_at(1'000'000);
  const float before = runtime.loss(params, held_out);
  AdamWOptions adamw;
  adamw.learning_rate = 3e-3;
  for (int step = 1; step <= 8; ++step) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    runtime.forward_backward(params, dataset.next(), grads);
    adamw_step(params, grads, m, v, step, adamw);
  }
  const float after = runtime.loss(params, held_out);
  MESSAGE("held-out loss on GPL-3 bytes: ", before, " → ", after, " after 8 steps");
  CHECK(after < before);
}

TEST_CASE("ModelRuntime refuses models it cannot execute, with InputError") {
  DecoderArchitecture gpt2 = tiny_architecture();
  gpt2.family = DecoderArchitecture::Family::gpt2;
  CHECK_THROWS_AS(ModelRuntime{build_decoder("gpt2-tiny", gpt2, "test")}, InputError);

  ModelSpec explicit_layers = tiny_model();
  explicit_layers.architecture.reset();
  CHECK_THROWS_AS(ModelRuntime{explicit_layers}, InputError);

  ModelSpec reshaped = tiny_model();
  reshaped.layers[1].tensors[2].shape = {7, 16};  // k_proj no longer matches num_kv_heads·head_dim
  CHECK_THROWS_WITH_AS(ModelRuntime{reshaped}, doctest::Contains("self_attn.k_proj.weight"), InputError);

  DecoderArchitecture odd_heads = tiny_architecture();
  odd_heads.hidden_size = 12;  // head_dim 3: RoPE needs pairs
  CHECK_THROWS_AS(ModelRuntime{build_decoder("odd", odd_heads, "test")}, InputError);

  const ModelRuntime runtime(tiny_model());
  const std::vector<float> params = runtime.init_parameters(0);
  Batch bad = random_batch(1, 4, 32, 1);
  bad.tokens[2] = 32;  // outside the vocabulary
  CHECK_THROWS_AS(static_cast<void>(runtime.loss(params, bad)), InputError);
  Batch too_long = random_batch(1, 65, 32, 1);  // max_position_embeddings is 64
  CHECK_THROWS_AS(static_cast<void>(runtime.loss(params, too_long)), InputError);
}
