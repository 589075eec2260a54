// The compute sweep: layer passes through runtime::make_layer_kernel and the linear layers' GEMMs through
// runtime::linear_forward / linear_backward, the Eigen products the CPU runtime trains with.
#include "kernel_sweep.h"

#include <algorithm>
#include <memory>
#include <span>

#include "compute_cost.h"
#include "counter_rng.h"
#include "errors.h"
#include "layer_kernel.h"
#include "linear.h"
#include "param_init.h"
#include "param_layout.h"

namespace shardplan::bench {
namespace {

// Uniform in [−scale, scale) from the counter stream (seed, i): identical data on every rank and platform.
std::vector<float> uniform_values(std::size_t count, std::uint64_t seed, float scale) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double unit = static_cast<double>(runtime::splitmix64(seed, i) >> 11) / 9007199254740992.0;  // 2^53
    values[i] = static_cast<float>(scale * (2.0 * unit - 1.0));
  }
  return values;
}

std::string short_tensor_name(const std::string& name) {
  // "mlp.gate_proj.weight" → "gate_proj"
  std::string stem = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
  const auto dot = stem.rfind('.');
  return dot == std::string::npos ? stem : stem.substr(dot + 1);
}

// Times forward and backward of model.layers[index] at `shape`, appending two rows.
void sweep_layer(const ModelSpec& model, const runtime::ModelLayout& model_layout, std::size_t index,
                 const TokenShape& shape, comm::Communicator& world, const KernelSweepOptions& options,
                 std::vector<KernelRow>& rows) {
  const LayerSpec& layer = model.layers[index];
  const std::size_t owner = layer.tied_to_layer.value_or(index);
  const std::unique_ptr<runtime::LayerKernel> kernel = runtime::make_layer_kernel(model, index);
  const runtime::DecoderDims dims = runtime::decoder_dims(model);
  // Only this layer's parameters (its owner's, when tied), initialised as the runtime initialises them.
  const runtime::LayerLayout& layout = model_layout.layers[owner];
  std::vector<float> params(static_cast<std::size_t>(layout.element_count));
  runtime::init_parameters(model_layout, runtime::InitOptions{}, model_layout.layer_offsets_elements[owner], params);
  std::vector<float> grads(params.size(), 0.0f);
  const runtime::LayerParams bound = runtime::bind_layer(layout, std::span<const float>(params));
  const runtime::LayerParams bound_grads = runtime::bind_layer(layout, std::span<float>(grads));

  runtime::Batch batch{shape.micro_batch, shape.seq_len, {}, {}};
  for (std::int64_t i = 0; i < batch.token_count(); ++i) {
    const auto vocab = static_cast<std::uint64_t>(dims.vocab_size);
    batch.tokens.push_back(static_cast<std::int32_t>(runtime::splitmix64(7, 2 * i) % vocab));
    batch.targets.push_back(static_cast<std::int32_t>(runtime::splitmix64(7, 2 * i + 1) % vocab));
  }
  runtime::Activations input;
  if (layer.kind != LayerKind::embedding) {
    input = {shape.micro_batch, shape.seq_len, dims.hidden_size,
             uniform_values(static_cast<std::size_t>(shape.tokens() * dims.hidden_size), 11, 1.0f)};
  }
  const runtime::LayerForward reference = kernel->forward(bound, batch, input, ActivationCheckpointing::none);
  // The loss layer's output is a scalar, and its gradient dL/dloss = 1; other layers get a small random gradient.
  const runtime::Activations grad_output =
      kernel->input_ids() == runtime::LayerKernel::InputIds::targets
          ? runtime::Activations::scalar(1.0f)
          : runtime::Activations{reference.output.micro_batch, reference.output.seq_len, reference.output.width,
                                 uniform_values(reference.output.values.size(), 13, 0.01f)};

  TrainingConfig training;
  training.seq_len = shape.seq_len;
  training.micro_batch = shape.micro_batch;
  training.precision = precision_recipe("fp32");  // the CPU runtime computes in fp32
  training.flash_attention = false;               // and materialises attention (no causal skipping)
  const std::string kind = to_string(layer.kind);
  const auto add = [&](const char* pass, ComputePass compute_pass, const std::function<void()>& body) {
    // The pass's kernels as the simulator charges them (pass_kernels.h).
    const PassKernels kernels = pass_kernels(model, index, training, compute_pass, ActivationCheckpointing::none);
    rows.push_back({kind + " " + pass, KernelClass::layer, shape.tokens(), kernels.flops(), kernels.memory_bytes,
                    time_iterations_s(world, options.timing, body), static_cast<double>(kernels.gemms.size())});
  };
  add("fwd", ComputePass::forward,
      [&] { (void)kernel->forward(bound, batch, input, ActivationCheckpointing::none); });
  add("bwd", ComputePass::backward, [&] { (void)kernel->backward(bound, reference.saved, grad_output, bound_grads); });
}

// Times y = x·Wᵀ and its backward (dW = dyᵀ·x, dx = dy·W) for one weight shape at `rows_m` tokens.
void sweep_gemm(const GemmShape& gemm, std::int64_t rows_m, comm::Communicator& world,
                const KernelSweepOptions& options, std::vector<KernelRow>& rows) {
  const runtime::LinearShape shape{rows_m, gemm.in_features, gemm.out_features};
  const auto m = static_cast<std::size_t>(rows_m), n = static_cast<std::size_t>(gemm.out_features),
             k = static_cast<std::size_t>(gemm.in_features);
  const std::vector<float> x = uniform_values(m * k, 17, 1.0f), weight = uniform_values(n * k, 19, 0.05f),
                           dy = uniform_values(m * n, 23, 0.01f);
  std::vector<float> y(m * n), dx(m * k), dweight(n * k, 0.0f);
  std::string label = " (";
  for (std::size_t i = 0; i < gemm.tensors.size(); ++i) label += (i ? "," : "") + short_tensor_name(gemm.tensors[i]);
  label += ")";
  const std::string dims = std::to_string(rows_m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  // 2·M·N·K FLOPs per GEMM (one multiply-add = 2 FLOPs); backward is two GEMMs of the same size (Narayanan et al.
  // 2021, §5.1).
  const double forward_flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  rows.push_back({"gemm " + dims + " fwd" + label, KernelClass::gemm, rows_m, forward_flops, 0,
                  time_iterations_s(world, options.timing, [&] {
                    runtime::linear_forward(shape, x.data(), weight.data(), nullptr, y.data());
                  }),
                  1.0});
  rows.push_back({"gemm " + dims + " bwd" + label, KernelClass::gemm, rows_m, 2.0 * forward_flops, 0,
                  time_iterations_s(world, options.timing, [&] {
                    runtime::linear_backward(shape, x.data(), weight.data(), dy.data(), dx.data(), false,
                                             dweight.data(), nullptr);
                  }),
                  2.0});
}

}  // namespace

const char* to_string(KernelClass kind) {
  switch (kind) {
    case KernelClass::layer: return "layer";
    case KernelClass::gemm: return "gemm";
    case KernelClass::memory: return "memory";
  }
  throw InternalError("unknown KernelClass " + std::to_string(static_cast<int>(kind)));
}

std::vector<TokenShape> kernel_token_shapes(const ModelSpec& model, const KernelSweepOptions& options) {
  std::int64_t seq_len = options.seq_len > 0 ? options.seq_len : model.default_seq_len;
  if (options.seq_len <= 0 && model.architecture && model.architecture->max_position_embeddings > 0) {
    seq_len = std::min(seq_len, model.architecture->max_position_embeddings);
  }
  const int full = static_cast<int>(std::max<std::int64_t>(1, seq_len));
  const int quarter = std::max(1, full / 4);
  std::vector<TokenShape> shapes;
  if (quarter < full) shapes.push_back({1, quarter});
  shapes.push_back({1, full});
  shapes.push_back({4, full});
  return shapes;
}

std::vector<GemmShape> model_gemm_shapes(const ModelSpec& model) {
  std::vector<GemmShape> shapes;
  for (std::size_t index = 0; index < model.layers.size(); ++index) {
    const LayerSpec& layer = model.layers[index];
    if (layer.kind != LayerKind::transformer_block && layer.kind != LayerKind::lm_head) continue;
    const LayerSpec& owner = model.layers[layer.tied_to_layer.value_or(index)];
    for (const TensorSpec& owned : owner.tensors) {
      if (owned.shape.size() != 2) continue;
      // A bare "weight" (lm_head, or the embedding it is tied to) is named by the layer that multiplies with it.
      TensorSpec tensor = owned;
      if (tensor.name == "weight") tensor.name = layer.name + ".weight";
      auto found = std::find_if(shapes.begin(), shapes.end(), [&](const GemmShape& shape) {
        return shape.out_features == tensor.shape[0] && shape.in_features == tensor.shape[1];
      });
      if (found == shapes.end()) {
        shapes.push_back({tensor.shape[0], tensor.shape[1], {tensor.name}});
      } else if (std::find(found->tensors.begin(), found->tensors.end(), tensor.name) == found->tensors.end()) {
        found->tensors.push_back(tensor.name);
      }
    }
  }
  return shapes;
}

std::vector<std::size_t> distinct_layer_kinds(const ModelSpec& model) {
  std::vector<std::size_t> picked;
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const bool seen = std::any_of(picked.begin(), picked.end(),
                                  [&](std::size_t j) { return model.layers[j].kind == model.layers[i].kind; });
    if (!seen) picked.push_back(i);
  }
  return picked;
}

void check_kernel_sweep_model(const ModelSpec& model) {
  (void)runtime::decoder_dims(model);
  for (std::size_t index : distinct_layer_kinds(model)) (void)runtime::make_layer_kernel(model, index);
}

std::vector<KernelRow> run_kernel_sweep(const ModelSpec& model, const KernelSweepOptions& options,
                                        comm::Communicator& world,
                                        const std::function<void(const KernelRow&)>& on_row) {
  check_kernel_sweep_model(model);
  const runtime::ModelLayout layout = runtime::model_layout(model);
  const std::vector<TokenShape> shapes = kernel_token_shapes(model, options);
  std::vector<KernelRow> rows;
  const auto emit_from = [&](std::size_t first) {
    if (on_row) {
      for (std::size_t i = first; i < rows.size(); ++i) on_row(rows[i]);
    }
  };
  for (std::size_t index : distinct_layer_kinds(model)) {
    for (const TokenShape& shape : shapes) {
      const std::size_t first = rows.size();
      sweep_layer(model, layout, index, shape, world, options, rows);
      emit_from(first);
    }
  }
  for (const GemmShape& gemm : model_gemm_shapes(model)) {
    for (const TokenShape& shape : shapes) {
      const std::size_t first = rows.size();
      sweep_gemm(gemm, shape.tokens(), world, options, rows);
      emit_from(first);
    }
  }
  return rows;
}

}  // namespace shardplan::bench
