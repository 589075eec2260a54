// The kernel sweep's cost per pass and the sequence length within Note [Kernel sweep bound].
#include "kernel_sweep_bound.h"

#include <algorithm>
#include <cstdio>

#include "errors.h"
#include "kernel_sweep.h"
#include "pass_kernels.h"
#include "precision.h"
#include "training.h"

namespace shardplan::bench {
namespace {

constexpr double kFloatBytes = 4;  // the CPU runtime computes and stores fp32
// The process around the sweep (MPI, the model, the tables): a whole tiny-llama sweep peaked at 34 MB resident here.
constexpr double kProcessBytes = 64.0 * 1024 * 1024;

// The largest measurement's buffers of a layer row at `shape` (sweep_layer in kernel_sweep.cpp), from above: the
// layer's parameters, gradients and backward's weight-gradient temporary (3x its parameters: llama-1b's sweep at 32
// tokens peaked at 838 MB resident, its lm_head's 262 MB weight three times over, against 0.94 GB estimated); what the
// reference forward saves for backward, kept through both timed passes, with a second set saved by each timed forward
// and a set of activation gradients in backward (3x the saved bytes); the pass's largest single tensor twice (the
// materialised attention scores or the logits and their gradient); and the input, output and output gradient at the
// model's width.
double layer_row_bytes(const ModelSpec& model, std::size_t index, const TokenShape& shape) {
  const LayerSpec& layer = model.layers[index];
  const LayerSpec& owner = model.layers[layer.tied_to_layer.value_or(index)];
  const auto tokens = static_cast<double>(shape.tokens());
  const double saved = layer.activation_bytes_per_token(shape.seq_len, 4, AttentionActivations::materialised,
                                                        ActivationCheckpointing::none) *
                       tokens;
  const double largest =
      layer.largest_tensor_bytes_per_token(shape.seq_len, 4, AttentionActivations::materialised) * tokens;
  const double width = model.architecture ? static_cast<double>(model.architecture->hidden_size) : 0.0;
  return kProcessBytes + 3 * kFloatBytes * static_cast<double>(owner.param_count()) + 3 * saved + 2 * largest +
         3 * kFloatBytes * width * tokens;
}

// sweep_gemm's buffers: x and dx (M×K), the weight and its gradient (N×K), y and dy (M×N).
double gemm_row_bytes(const GemmShape& gemm, std::int64_t rows_m) {
  const auto m = static_cast<double>(rows_m), n = static_cast<double>(gemm.out_features),
             k = static_cast<double>(gemm.in_features);
  return kProcessBytes + 2 * kFloatBytes * (m * k + n * k + m * n);
}

std::string gb_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  return text;
}

std::string cost_text(const KernelSweepCost& cost) {
  char text[160];
  std::snprintf(text, sizeof text, "%.3g FLOPs per pass (about %.3g s at %.0f GFLOP/s) and a peak of %s",
                cost.flops, cost.flops / kReferenceFlopsPerS, kReferenceFlopsPerS / 1e9,
                gb_text(cost.peak_bytes).c_str());
  return text;
}

std::string bound_text() {
  char text[96];
  std::snprintf(text, sizeof text, "at most %.3g FLOPs per pass and %s (Note [Kernel sweep bound])",
                kMaxKernelSweepFlopsPerPass, gb_text(kMaxKernelSweepBytes).c_str());
  return text;
}

// The model's default sequence length, capped at its positions (as kernel_token_shapes takes it).
std::int64_t default_seq_len(const ModelSpec& model) {
  std::int64_t seq_len = model.default_seq_len;
  if (model.architecture && model.architecture->max_position_embeddings > 0) {
    seq_len = std::min(seq_len, model.architecture->max_position_embeddings);
  }
  return std::max<std::int64_t>(1, seq_len);
}

// The longest power-of-two fraction of `from` (from, from/2, ...) whose pass fits; 0 when not even 1 token does.
std::int64_t longest_fitting(const ModelSpec& model, std::int64_t from) {
  for (std::int64_t seq_len = from; seq_len >= 1; seq_len /= 2) {
    if (kernel_sweep_cost(model, seq_len).fits()) return seq_len;
  }
  return 0;
}

}  // namespace

KernelSweepCost kernel_sweep_cost(const ModelSpec& model, std::int64_t seq_len) {
  KernelSweepOptions options;
  options.seq_len = seq_len;
  const std::vector<TokenShape> shapes = kernel_token_shapes(model, options);
  KernelSweepCost cost;
  for (std::size_t index : distinct_layer_kinds(model)) {
    for (const TokenShape& shape : shapes) {
      TrainingConfig training;  // as sweep_layer prices the row
      training.seq_len = shape.seq_len;
      training.micro_batch = shape.micro_batch;
      training.precision = precision_recipe("fp32");
      training.flash_attention = false;
      const double forward =
          pass_kernels(model, index, training, ComputePass::forward, ActivationCheckpointing::none).flops();
      const double backward =
          pass_kernels(model, index, training, ComputePass::backward, ActivationCheckpointing::none).flops();
      cost.flops += 2 * forward + backward;  // the reference forward, then one of each timed pass
      cost.peak_bytes = std::max(cost.peak_bytes, layer_row_bytes(model, index, shape));
    }
  }
  for (const GemmShape& gemm : model_gemm_shapes(model)) {
    for (const TokenShape& shape : shapes) {
      // 2·M·N·K forward and twice that backward (sweep_gemm).
      cost.flops += 3 * 2.0 * static_cast<double>(shape.tokens()) * static_cast<double>(gemm.out_features) *
                    static_cast<double>(gemm.in_features);
      cost.peak_bytes = std::max(cost.peak_bytes, gemm_row_bytes(gemm, shape.tokens()));
    }
  }
  return cost;
}

BoundedSeqLen bounded_kernel_seq_len(const ModelSpec& model, std::int64_t requested_seq_len) {
  BoundedSeqLen bounded;
  if (requested_seq_len > 0) {
    bounded.seq_len = requested_seq_len;
    bounded.cost = kernel_sweep_cost(model, requested_seq_len);
    if (bounded.cost.fits()) return bounded;
    const std::int64_t fitting = longest_fitting(model, requested_seq_len / 2);
    throw InputError("--seq-len " + std::to_string(requested_seq_len) + ": the kernel sweep of " + model.name +
                     " would take " + cost_text(bounded.cost) + ", expected " + bound_text() +
                     (fitting > 0 ? "; --seq-len " + std::to_string(fitting) + " fits"
                                  : "; not even --seq-len 1 fits (a smaller --model)"));
  }
  bounded.default_seq_len = default_seq_len(model);
  bounded.default_cost = kernel_sweep_cost(model, bounded.default_seq_len);
  bounded.seq_len = bounded.default_seq_len;
  bounded.cost = bounded.default_cost;
  if (bounded.cost.fits()) return bounded;
  bounded.seq_len = longest_fitting(model, bounded.default_seq_len / 2);
  if (bounded.seq_len == 0) {
    throw InputError("--model " + model.name + ": the kernel sweep would take " +
                     cost_text(kernel_sweep_cost(model, 1)) + " even at --seq-len 1, expected " + bound_text() +
                     " (a smaller --model)");
  }
  bounded.cost = kernel_sweep_cost(model, bounded.seq_len);
  bounded.scaled_down = true;
  return bounded;
}

std::string describe_scaled_down(const BoundedSeqLen& bounded) {
  return "# kernel sweep at --seq-len " + std::to_string(bounded.seq_len) + " (" + cost_text(bounded.cost) +
         "): the model's " + std::to_string(bounded.default_seq_len) + " would take " +
         cost_text(bounded.default_cost) + ", over the bound, " + bound_text() + "\n";
}

}  // namespace shardplan::bench
