// GPU kernel tests, row-reduction families: RMSNorm and the LM head's cross-entropy against the CPU runtime.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "device_kernels.h"
#include "kernel_test_support.h"
#include "linear.h"
#include "rmsnorm.h"

namespace shardplan::gpu::kernels::testing {
namespace {

// Reference: runtime::rmsnorm_forward / rmsnorm_backward, on an odd shape (19 rows — not a multiple of the weight
// kernel's 8 row lanes — of width 300 — more than a block's 256 threads and not a multiple of 32). Both sides sum
// in double, in different orders: rel 1e-5 / abs 1e-6 forward (values O(1)); backward rel 1e-5 / abs 1e-5, as dx
// subtracts two O(1) terms and grad_weight sums 19 of them. dx is checked added (as the CPU always does) and
// written (accumulate_dx = false against the CPU from zeros).
TEST_CASE("kernel: rmsnorm") {
  Stream stream;
  constexpr std::int64_t rows = 19, width = 300;
  constexpr double eps = 1e-5;
  const auto size = static_cast<std::size_t>(rows * width);
  const std::vector<float> x = uniform_buffer(size, 71, -2.0f, 2.0f);
  const std::vector<float> weight = uniform_buffer(width, 72, 0.5f, 1.5f);
  const std::vector<float> dy = uniform_buffer(size, 73, -1.0f, 1.0f);
  const std::vector<float> dx_before = uniform_buffer(size, 74, -1.0f, 1.0f);
  const std::vector<float> grad_weight_before = uniform_buffer(width, 75, -0.5f, 0.5f);

  std::vector<float> y(size), inv_rms(rows);
  runtime::rmsnorm_forward(x.data(), weight.data(), rows, width, eps, y.data(), inv_rms.data());
  std::vector<float> dx_added = dx_before, dx_written(size, 0.0f), grad_weight = grad_weight_before;
  runtime::rmsnorm_backward(x.data(), inv_rms.data(), weight.data(), dy.data(), rows, width, dx_added.data(),
                            grad_weight.data());
  std::vector<float> unused_grad_weight(width, 0.0f);
  runtime::rmsnorm_backward(x.data(), inv_rms.data(), weight.data(), dy.data(), rows, width, dx_written.data(),
                            unused_grad_weight.data());

  DeviceBuffer<float> x_d(stream, x), weight_d(stream, weight), dy_d(stream, dy);
  DeviceBuffer<float> y_d(stream, size), inv_rms_d(stream, rows);
  rmsnorm_forward(stream, x_d.get(), weight_d.get(), rows, width, eps, y_d.get(), inv_rms_d.get());
  check_close(y_d.download(), y, 1e-5, 1e-6, "rmsnorm forward y");
  check_close(inv_rms_d.download(), inv_rms, 1e-5, 1e-6, "rmsnorm forward inv_rms");

  // Backward from the CPU's inv_rms, so this checks the backward kernels alone.
  inv_rms_d.upload(inv_rms);
  DeviceBuffer<float> dx_d(stream, dx_before), grad_weight_d(stream, grad_weight_before);
  rmsnorm_backward(stream, x_d.get(), inv_rms_d.get(), weight_d.get(), dy_d.get(), rows, width, dx_d.get(), true,
                   grad_weight_d.get());
  check_close(dx_d.download(), dx_added, 1e-5, 1e-5, "rmsnorm backward dx (added)");
  check_close(grad_weight_d.download(), grad_weight, 1e-5, 1e-5, "rmsnorm backward grad_weight (added)");

  dx_d.upload(std::vector<float>(size, 1e30f));  // must be overwritten, not added to
  grad_weight_d.upload(grad_weight_before);
  rmsnorm_backward(stream, x_d.get(), inv_rms_d.get(), weight_d.get(), dy_d.get(), rows, width, dx_d.get(), false,
                   grad_weight_d.get());
  check_close(dx_d.download(), dx_written, 1e-5, 1e-5, "rmsnorm backward dx (written)");
  check_close(grad_weight_d.download(), grad_weight, 1e-5, 1e-5, "rmsnorm backward grad_weight (second run)");
}

// One vocabulary size; rows = kTokens = kHidden (Note [Identity input]).
void check_cross_entropy(Stream& stream, std::int64_t vocab) {
  runtime::DecoderDims dims = test_dims();
  dims.vocab_size = vocab;
  const std::string where = " (vocab " + std::to_string(vocab) + ")";
  const auto logits_size = static_cast<std::size_t>(kTokens * vocab);
  std::vector<float> weight = uniform_buffer(static_cast<std::size_t>(vocab * kHidden), 81, -4.0f, 4.0f);
  std::vector<float> grad_weight(weight.size(), 0.0f);
  const runtime::LayerParams params = bind({{"weight", {vocab, kHidden}, &weight}});
  const runtime::LayerParams grads = bind({{"weight", {vocab, kHidden}, &grad_weight}});
  const runtime::Batch batch{kMicroBatch, kSeqLen, random_ids(kTokens, vocab, 82), random_ids(kTokens, vocab, 83)};
  const runtime::Activations hidden{kMicroBatch, kSeqLen, kHidden, identity(kHidden)};
  const auto layer = runtime::make_lm_head_loss(dims);
  const runtime::LayerForward forward = layer->forward(params, batch, hidden, ActivationCheckpointing::none);
  constexpr float grad_loss = 0.5f;  // as when two micro-batches are accumulated
  layer->backward(params, forward.saved, runtime::Activations::scalar(grad_loss), grads);
  const std::vector<float>& want_probs = forward.saved.get("probs");
  const std::vector<float> want_mean{forward.output.values[0]};
  const std::vector<float> want_d_logits = transposed(grad_weight, vocab, kTokens);
  std::vector<float> want_token_loss(static_cast<std::size_t>(kTokens));
  for (std::size_t t = 0; t < want_token_loss.size(); ++t) {
    const std::size_t target = t * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(batch.targets[t]);
    want_token_loss[t] = static_cast<float>(-std::log(static_cast<double>(want_probs[target])));
  }

  std::vector<float> logits(logits_size);  // the layer's own GEMM call, so the same bits as its logits
  runtime::linear_forward({kTokens, kHidden, vocab}, hidden.values.data(), weight.data(), nullptr, logits.data());
  DeviceBuffer<std::int32_t> targets(stream, batch.targets);
  DeviceBuffer<float> logits_d(stream, logits), probs_d(stream, logits_size), d_logits_d(stream, logits_size);
  DeviceBuffer<float> token_loss_d(stream, want_token_loss.size()), mean_d(stream, 1);
  cross_entropy_forward(stream, logits_d.get(), targets.get(), kTokens, vocab, probs_d.get(), token_loss_d.get(),
                        mean_d.get());
  cross_entropy_backward(stream, probs_d.get(), targets.get(), kTokens, vocab, grad_loss, d_logits_d.get());
  check_close(probs_d.download(), want_probs, 1e-5, 1e-7, "cross-entropy probs" + where);
  check_close(mean_d.download(), want_mean, 1e-6, 0.0, "cross-entropy mean loss" + where);
  check_close(token_loss_d.download(), want_token_loss, 1e-5, 1e-5, "cross-entropy per-token loss" + where);
  check_close(d_logits_d.download(), want_d_logits, 1e-5, 1e-9, "cross-entropy d_logits" + where);

  // In place: logits → probs → d_logits in one buffer.
  mean_d.upload({0.0f});
  cross_entropy_forward(stream, logits_d.get(), targets.get(), kTokens, vocab, logits_d.get(), token_loss_d.get(),
                        mean_d.get());
  check_close(logits_d.download(), want_probs, 1e-5, 1e-7, "cross-entropy probs (in place)" + where);
  check_close(mean_d.download(), want_mean, 1e-6, 0.0, "cross-entropy mean loss (in place)" + where);
  cross_entropy_backward(stream, logits_d.get(), targets.get(), kTokens, vocab, grad_loss, logits_d.get());
  check_close(logits_d.download(), want_d_logits, 1e-5, 1e-9, "cross-entropy d_logits (in place)" + where);
}

// Reference: the CPU LM head (make_lm_head_loss) with the identity as hidden input (Note [Identity input]): its
// logits are then exactly its weight transposed, its saved "probs" are the softmax, its output the mean loss, and
// its weight gradient is dL/dlogits transposed. Vocabularies of 64 and 333 (more than a row's 256 threads).
// Tolerances: probs rel 1e-5 / abs 1e-7 (expf vs std::exp, sums in another order; logits within ±4, so probs
// ≥ ~1e-6); mean loss rel 1e-6 (T = 32 terms of O(ln V) summed in double on both sides; the GPU rounds each
// token's loss to float first); per-token loss against −log of the CPU's probability of the target, rel 1e-5 /
// abs 1e-5; d_logits rel 1e-5 / abs 1e-9 (values down to ~1e-8). Out of place, then in place.
TEST_CASE("kernel: cross_entropy") {
  Stream stream;
  check_cross_entropy(stream, kVocab);
  check_cross_entropy(stream, 333);
}

}  // namespace
}  // namespace shardplan::gpu::kernels::testing
