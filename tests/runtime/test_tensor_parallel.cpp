// Tensor parallelism in the runtime: the TP rank model's shapes, the whole ↔ rank copies, and the sequence-parallel
// decoder block on two in-process TP ranks against the ordinary block (outputs, input and parameter gradients).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <cmath>
#include <thread>
#include <vector>

#include "errors.h"
#include "layer_kernel.h"
#include "param_layout.h"
#include "runtime_fixtures.h"
#include "tensor_parallel_group.h"
#include "tensor_parallel_model.h"

namespace shardplan::runtime::testing {
namespace {

const TensorSpec& tensor_of(const LayerSpec& layer, const std::string& name) {
  for (const TensorSpec& tensor : layer.tensors) {
    if (tensor.name == name) return tensor;
  }
  FAIL("no tensor " << name);
  throw;  // unreachable
}

// Two TP ranks on two threads: each collective is a rendezvous on a shared slot per rank (TensorParallelGroup's
// contract written out directly), so the block meets exactly the sums and concatenations the MPI group gives it.
struct Exchange {
  std::barrier<> sync{2};
  std::array<std::vector<float>, 2> slots;
};

class ThreadGroup final : public TensorParallelGroup {
 public:
  ThreadGroup(Exchange& exchange, int rank) : exchange_(&exchange), rank_(rank) {}
  int degree() const override { return 2; }
  int rank() const override { return rank_; }
  void all_gather(std::span<const float> local, std::span<float> whole) override {
    ++all_gathers;
    post(local);
    for (std::size_t r = 0; r < 2; ++r) std::copy(exchange_->slots[r].begin(), exchange_->slots[r].end(), whole.begin() + r * local.size());
    exchange_->sync.arrive_and_wait();
  }
  void reduce_scatter(std::span<const float> whole, std::span<float> local) override {
    ++reduce_scatters;
    post(whole);
    const std::size_t first = static_cast<std::size_t>(rank_) * local.size();
    for (std::size_t i = 0; i < local.size(); ++i) local[i] = exchange_->slots[0][first + i] + exchange_->slots[1][first + i];
    exchange_->sync.arrive_and_wait();
  }
  void all_reduce(std::span<float> buffer) override {
    ++all_reduces;
    post(buffer);
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = exchange_->slots[0][i] + exchange_->slots[1][i];
    exchange_->sync.arrive_and_wait();
  }
  void all_reduce_max(std::span<float> buffer) override {
    ++all_reduces;
    post(buffer);
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = std::max(exchange_->slots[0][i], exchange_->slots[1][i]);
    exchange_->sync.arrive_and_wait();
  }
  int all_gathers = 0, reduce_scatters = 0, all_reduces = 0;

 private:
  void post(std::span<const float> values) {
    exchange_->slots[static_cast<std::size_t>(rank_)].assign(values.begin(), values.end());
    exchange_->sync.arrive_and_wait();
  }
  Exchange* exchange_;
  int rank_;
};

// How many collectives of `kind` the cost model lists for a pass (Note [Tensor-parallel collectives]), leaving out
// the parameter-gradient all-reduces, which the executor runs after the kernel (Note [Replicated gradients]).
int listed(const std::vector<ActivationCollectiveSpec>& pass, ActivationCollective kind) {
  int count = 0;
  for (const ActivationCollectiveSpec& collective : pass) count += collective.kind == kind && collective.gradient_of.empty();
  return count;
}

double relative_distance(const float* a, const float* b, std::int64_t count) {
  double difference = 0, norm = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    difference += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(difference / norm);
}

}  // namespace

TEST_CASE("tensor_parallel_rank_model: column-parallel rows and row-parallel columns divided, the rest whole") {
  const ModelSpec model = tiny_model(false, true);  // with q/k/v biases
  const ModelSpec rank = tensor_parallel_rank_model(model, 2);
  const LayerSpec& whole_block = model.layers[1];
  const LayerSpec& block = rank.layers[1];
  REQUIRE(block.kind == LayerKind::transformer_block);
  // hidden 16, 4 heads of 4 over 2 kv heads, FFN 24: each TP rank holds 2 heads, 1 kv head and 12 FFN columns.
  CHECK(tensor_of(block, "self_attn.q_proj.weight").shape == std::vector<std::int64_t>{8, 16});
  CHECK(tensor_of(block, "self_attn.k_proj.weight").shape == std::vector<std::int64_t>{4, 16});
  CHECK(tensor_of(block, "self_attn.v_proj.bias").shape == std::vector<std::int64_t>{4});
  CHECK(tensor_of(block, "self_attn.o_proj.weight").shape == std::vector<std::int64_t>{16, 8});
  CHECK(tensor_of(block, "mlp.up_proj.weight").shape == std::vector<std::int64_t>{12, 16});
  CHECK(tensor_of(block, "mlp.down_proj.weight").shape == std::vector<std::int64_t>{16, 12});
  CHECK(tensor_of(block, "input_layernorm.weight").shape == std::vector<std::int64_t>{16});
  // Two ranks hold the block's parameters once, plus a second copy of the two norm scales.
  CHECK(2 * block.param_count() == whole_block.param_count() + 2 * 16);
  CHECK(2 * rank.layers[0].param_count() == model.layers[0].param_count());  // the embedding split over the vocabulary
  CHECK(2 * rank.layers.back().param_count() == model.layers.back().param_count());  // and the head
  CHECK_THROWS_AS(tensor_parallel_rank_model(model, 3), InputError);    // 4 heads, 2 kv heads, FFN 24
  CHECK_THROWS_AS(tensor_parallel_rank_model(model, 4), InputError);    // 2 kv heads
}

TEST_CASE("extract and insert_tensor_parallel_rank: each rank's rows and columns, and back to the whole model") {
  const ModelSpec model = tiny_model();
  const ModelLayout whole = model_layout(model);
  const ModelLayout rank_layout = model_layout(tensor_parallel_rank_model(model, 2));
  const std::vector<float> values = uniform_buffer(static_cast<std::size_t>(whole.element_count), 5, -1, 1);
  std::vector<float> assembled(values.size(), 0.0f);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<float> mine(static_cast<std::size_t>(rank_layout.element_count));
    extract_tensor_parallel_rank(whole, rank_layout, 2, rank, values, mine);
    // Written from Note [Tensor-parallel split]: q row j of rank r is whole row 8r + j; o column c is whole 8r + c.
    const LayerParams w = bind_model_layer(whole, 1, std::span<const float>(values));
    const LayerParams m = bind_model_layer(rank_layout, 1, std::span<const float>(mine));
    CHECK(m.tensor("self_attn.q_proj.weight")[1 * 16 + 3] == w.tensor("self_attn.q_proj.weight")[(8 * rank + 1) * 16 + 3]);
    CHECK(m.tensor("self_attn.o_proj.weight")[2 * 8 + 5] == w.tensor("self_attn.o_proj.weight")[2 * 16 + 8 * rank + 5]);
    CHECK(m.tensor("mlp.down_proj.weight")[3 * 12 + 11] == w.tensor("mlp.down_proj.weight")[3 * 24 + 12 * rank + 11]);
    CHECK(m.tensor("post_attention_layernorm.weight")[7] == w.tensor("post_attention_layernorm.weight")[7]);
    insert_tensor_parallel_rank(whole, rank_layout, 2, rank, mine, assembled);
  }
  CHECK(assembled == values);
}

// The sequence-parallel block on two TP ranks computes the ordinary block: each rank's output and input gradient are
// its rows of the whole block's; the column/row-parallel weights' gradients are its slices of the whole ones and the
// replicated norm scales' gradients sum over the ranks to the whole ones (Note [Replicated gradients]). Each pass
// runs the collectives the cost model lists for it. Mutation tried: the block's backward without its all-gather of
// dL/dr before the attention half — input gradients 8e-4 off, q/k/v/o and norm gradients 1e-2 off, 3 all-gathers.
TEST_CASE("sequence-parallel decoder block on 2 TP ranks equals the decoder block") {
  const ModelSpec model = tiny_model();
  const ModelSpec rank_model = tensor_parallel_rank_model(model, 2);
  const ModelLayout whole = model_layout(model), rank_layout = model_layout(rank_model);
  const std::size_t layer = 1;
  const int micro_batch = 2, seq_len = 6;
  const std::int64_t h = 16, tokens = micro_batch * seq_len, share = tokens / 2;
  const std::vector<float> params = uniform_buffer(static_cast<std::size_t>(whole.element_count), 9, -0.3f, 0.3f);
  const Batch batch = random_batch(micro_batch, seq_len, 32, 4);
  Activations input{micro_batch, seq_len, h, uniform_buffer(static_cast<std::size_t>(tokens * h), 10, -1, 1)};
  const std::vector<float> grad_values = uniform_buffer(static_cast<std::size_t>(tokens * h), 11, -1, 1);

  const auto kernel = make_layer_kernel(model, layer);
  std::vector<float> grads(params.size(), 0.0f);
  const LayerForward forward =
      kernel->forward(bind_model_layer(whole, layer, std::span<const float>(params)), batch, input,
                      ActivationCheckpointing::none);
  const Activations grad_input = kernel->backward(bind_model_layer(whole, layer, std::span<const float>(params)),
                                                  forward.saved, {micro_batch, seq_len, h, grad_values},
                                                  bind_model_layer(whole, layer, std::span<float>(grads)));

  Exchange exchange;
  std::array<ThreadGroup, 2> groups{ThreadGroup(exchange, 0), ThreadGroup(exchange, 1)};
  std::array<std::vector<float>, 2> outputs, input_grads, rank_grads;
  std::array<int, 2> forward_gathers{}, forward_scatters{};
  std::array<std::thread, 2> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks[static_cast<std::size_t>(r)] = std::thread([&, r] {
      const auto ri = static_cast<std::size_t>(r);
      std::vector<float> mine(static_cast<std::size_t>(rank_layout.element_count));
      extract_tensor_parallel_rank(whole, rank_layout, 2, r, params, mine);
      rank_grads[ri].assign(mine.size(), 0.0f);
      const auto tp_kernel = make_tensor_parallel_layer_kernel(rank_model, layer, {micro_batch, seq_len}, groups[ri]);
      Batch part{1, static_cast<int>(share), {}, {}};
      part.tokens.assign(batch.tokens.begin() + r * share, batch.tokens.begin() + (r + 1) * share);
      part.targets.assign(batch.targets.begin() + r * share, batch.targets.begin() + (r + 1) * share);
      const auto rows = [&](const std::vector<float>& all) {
        return std::vector<float>(all.begin() + r * share * h, all.begin() + (r + 1) * share * h);
      };
      const LayerForward tp_forward = tp_kernel->forward(bind_model_layer(rank_layout, layer, std::span<const float>(mine)),
                                                         part, {1, static_cast<int>(share), h, rows(input.values)},
                                                         ActivationCheckpointing::none);
      forward_gathers[ri] = groups[ri].all_gathers;
      forward_scatters[ri] = groups[ri].reduce_scatters;
      outputs[ri] = tp_forward.output.values;
      input_grads[ri] = tp_kernel
                            ->backward(bind_model_layer(rank_layout, layer, std::span<const float>(mine)),
                                       tp_forward.saved, {1, static_cast<int>(share), h, rows(grad_values)},
                                       bind_model_layer(rank_layout, layer, std::span<float>(rank_grads[ri])))
                            .values;
    });
  }
  for (auto& thread : ranks) thread.join();

  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    const std::int64_t first = static_cast<std::int64_t>(r) * share * h;
    CHECK(relative_distance(outputs[r].data(), forward.output.values.data() + first, share * h) < 1e-6);
    CHECK(relative_distance(input_grads[r].data(), grad_input.values.data() + first, share * h) < 1e-6);
    // The cost model's list for the block (2 and 2 each way), read from the rank model's kernel spec.
    const LayerKernelSpec& spec = *rank_model.layers[layer].kernels;
    using AC = ActivationCollective;
    CHECK(forward_gathers[r] == listed(spec.tp_forward, AC::all_gather));
    CHECK(forward_scatters[r] == listed(spec.tp_forward, AC::reduce_scatter));
    CHECK(groups[r].all_gathers == forward_gathers[r] + listed(spec.tp_backward, AC::all_gather));
    CHECK(groups[r].reduce_scatters == forward_scatters[r] + listed(spec.tp_backward, AC::reduce_scatter));
    CHECK(groups[r].all_gathers == 4);
    CHECK(groups[r].reduce_scatters == 4);
    CHECK(groups[r].all_reduces == 0);
  }
  std::vector<float> assembled(grads.size(), 0.0f);
  for (int r = 0; r < 2; ++r) insert_tensor_parallel_rank(whole, rank_layout, 2, r, rank_grads[static_cast<std::size_t>(r)], assembled);
  const LayerParams expected = bind_model_layer(whole, layer, std::span<float>(grads));
  const LayerParams got = bind_model_layer(whole, layer, std::span<float>(assembled));
  for (const BoundTensor& tensor : expected.tensors) {
    CAPTURE(tensor.name);
    std::vector<float> value(got.tensor(tensor.name), got.tensor(tensor.name) + tensor.element_count);
    if (tensor_of(rank_model.layers[layer], tensor.name).shape == tensor.shape) {  // whole: a norm scale
      // Each rank's partial gradient from its own tokens; their sum is the whole one.
      const LayerParams rank0 = bind_model_layer(rank_layout, layer, std::span<float>(rank_grads[0]));
      const LayerParams rank1 = bind_model_layer(rank_layout, layer, std::span<float>(rank_grads[1]));
      for (std::int64_t i = 0; i < tensor.element_count; ++i) value[i] = rank0.tensor(tensor.name)[i] + rank1.tensor(tensor.name)[i];
    }
    CHECK(relative_distance(value.data(), tensor.data, tensor.element_count) < 1e-5);
  }
}

// The vocabulary-parallel embedding and the loss-parallel head on two TP ranks compute the single-process layers
// (Note [Vocabulary-parallel layers]): the embedding's output rows and the head's mean loss and input gradient rows
// equal the whole layers', each rank's table gradient is its rows of the whole one, and each pass runs the
// collectives the cost model lists for the layer (embedding: a reduce-scatter, then an all-gather; head: an
// all-gather and 3 all-reduces, then a reduce-scatter).
TEST_CASE("vocabulary-parallel embedding and loss-parallel head on 2 TP ranks equal the single-process layers") {
  const ModelSpec model = tiny_model();
  const ModelSpec rank_model = tensor_parallel_rank_model(model, 2);
  const ModelLayout whole = model_layout(model), rank_layout = model_layout(rank_model);
  const std::size_t embedding = 0, head = model.layers.size() - 1;
  REQUIRE(model.layers[head].kind == LayerKind::lm_head);
  const int micro_batch = 2, seq_len = 6;
  const std::int64_t h = 16, tokens = micro_batch * seq_len, share = tokens / 2;
  const std::vector<float> params = uniform_buffer(static_cast<std::size_t>(whole.element_count), 19, -0.3f, 0.3f);
  const Batch batch = random_batch(micro_batch, seq_len, 32, 7);
  const Activations hidden{micro_batch, seq_len, h, uniform_buffer(static_cast<std::size_t>(tokens * h), 20, -1, 1)};
  const std::vector<float> grad_rows = uniform_buffer(static_cast<std::size_t>(tokens * h), 21, -1, 1);

  // The single-process layers.
  std::vector<float> grads(params.size(), 0.0f);
  const auto run_whole = [&](std::size_t layer, const Activations& input, const Activations& grad_output) {
    const auto kernel = make_layer_kernel(model, layer);
    const LayerParams p = bind_model_layer(whole, layer, std::span<const float>(params));
    const LayerForward forward = kernel->forward(p, batch, input, ActivationCheckpointing::none);
    const Activations grad_input =
        kernel->backward(p, forward.saved, grad_output, bind_model_layer(whole, layer, std::span<float>(grads)));
    return std::make_pair(forward.output, grad_input);
  };
  const auto [embedded, unused] = run_whole(embedding, {}, {micro_batch, seq_len, h, grad_rows});
  const auto [loss, grad_hidden] = run_whole(head, hidden, Activations::scalar(1.0f));

  Exchange exchange;
  std::array<ThreadGroup, 2> groups{ThreadGroup(exchange, 0), ThreadGroup(exchange, 1)};
  std::array<std::vector<float>, 2> embedded_rows, head_grad_rows, rank_grads;
  std::array<float, 2> losses{};
  std::array<std::array<int, 3>, 2> after_head_forward{};
  std::array<std::thread, 2> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks[static_cast<std::size_t>(r)] = std::thread([&, r] {
      const auto ri = static_cast<std::size_t>(r);
      ThreadGroup& group = groups[ri];
      std::vector<float> mine(static_cast<std::size_t>(rank_layout.element_count));
      extract_tensor_parallel_rank(whole, rank_layout, 2, r, params, mine);
      rank_grads[ri].assign(mine.size(), 0.0f);
      Batch part = batch;  // Note [Sequence-parallel tokens]: the rank's rows, the whole micro-batch's ids
      part.micro_batch = 1;
      part.seq_len = static_cast<int>(share);
      part.group_degree = 2;
      const auto rows = [&](const std::vector<float>& all) {
        return std::vector<float>(all.begin() + r * share * h, all.begin() + (r + 1) * share * h);
      };
      const auto run = [&](std::size_t layer, const Activations& input, const Activations& grad_output, bool head_layer) {
        const auto kernel = make_tensor_parallel_layer_kernel(rank_model, layer, {micro_batch, seq_len}, group);
        const LayerParams p = bind_model_layer(rank_layout, layer, std::span<const float>(mine));
        const LayerForward forward = kernel->forward(p, part, input, ActivationCheckpointing::none);
        if (head_layer) after_head_forward[ri] = {group.all_gathers, group.reduce_scatters, group.all_reduces};
        const Activations grad_input = kernel->backward(p, forward.saved, grad_output,
                                                        bind_model_layer(rank_layout, layer, std::span<float>(rank_grads[ri])));
        return std::make_pair(forward.output, grad_input);
      };
      embedded_rows[ri] = run(embedding, {}, {1, static_cast<int>(share), h, rows(grad_rows)}, false).first.values;
      const auto [rank_loss, rank_grad] =
          run(head, {1, static_cast<int>(share), h, rows(hidden.values)}, Activations::scalar(1.0f), true);
      losses[ri] = rank_loss.values.at(0);
      head_grad_rows[ri] = rank_grad.values;
    });
  }
  for (auto& thread : ranks) thread.join();

  using AC = ActivationCollective;
  const LayerKernelSpec& embedding_spec = *rank_model.layers[embedding].kernels;
  const LayerKernelSpec& head_spec = *rank_model.layers[head].kernels;
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    const std::int64_t first = static_cast<std::int64_t>(r) * share * h;
    CHECK(relative_distance(embedded_rows[r].data(), embedded.values.data() + first, share * h) < 1e-6);
    CHECK(std::abs(losses[r] - loss.values.at(0)) <= 1e-6 * std::abs(loss.values.at(0)));
    CHECK(relative_distance(head_grad_rows[r].data(), grad_hidden.values.data() + first, share * h) < 1e-5);
    // Embedding forward, then head forward: the cost model's tp_forward of both; then the head's backward.
    CHECK(after_head_forward[r][0] == listed(embedding_spec.tp_backward, AC::all_gather) +
                                          listed(head_spec.tp_forward, AC::all_gather));
    CHECK(after_head_forward[r][1] == listed(embedding_spec.tp_forward, AC::reduce_scatter));
    CHECK(after_head_forward[r][2] == listed(head_spec.tp_forward, AC::all_reduce));
    CHECK(after_head_forward[r][2] == 3);
    CHECK(groups[r].reduce_scatters == after_head_forward[r][1] + listed(head_spec.tp_backward, AC::reduce_scatter));
    CHECK(groups[r].all_gathers == after_head_forward[r][0]);
  }
  std::vector<float> assembled(grads.size(), 0.0f);
  for (int r = 0; r < 2; ++r) insert_tensor_parallel_rank(whole, rank_layout, 2, r, rank_grads[static_cast<std::size_t>(r)], assembled);
  for (std::size_t layer : {embedding, head}) {
    CAPTURE(layer);
    const float* expected = bind_model_layer(whole, layer, std::span<float>(grads)).tensor("weight");
    const float* got = bind_model_layer(whole, layer, std::span<float>(assembled)).tensor("weight");
    CHECK(relative_distance(got, expected, 32 * h) < 1e-5);
  }
}

}  // namespace shardplan::runtime::testing
