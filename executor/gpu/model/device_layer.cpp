// The DeviceLayer driver (input checks, checkpointing as Note [Device layer driver]) and the value types around it:
// parameter and gradient lookups by name, DeviceSaved, to_string(DeviceDType).
#include "device_layer.h"

#include "device_buffers.h"
#include "errors.h"
#include "gemm.h"

namespace shardplan::gpu {

const char* to_string(DeviceDType dtype) { return dtype == DeviceDType::f32 ? "fp32" : "bf16"; }

const DeviceTensor* DeviceLayerParams::find(std::string_view name) const {
  for (const auto& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

const DeviceTensor& DeviceLayerParams::tensor(std::string_view name) const {
  const DeviceTensor* found = find(name);
  SHARDPLAN_CHECK(found != nullptr, "device layer view has no tensor '" + std::string(name) + "'");
  return *found;
}

float* DeviceLayerGrads::find(std::string_view name) const {
  for (const auto& tensor : tensors) {
    if (tensor.name == name) return tensor.data;
  }
  return nullptr;
}

float* DeviceLayerGrads::tensor(std::string_view name) const {
  float* found = find(name);
  SHARDPLAN_CHECK(found != nullptr, "device gradient view has no tensor '" + std::string(name) + "'");
  return found;
}

DeviceBuffer& DeviceSaved::put(std::string name, DeviceBuffer buffer) {
  for (auto& [stored_name, stored] : tensors_) {
    if (stored_name == name) {
      stored = std::move(buffer);
      return stored;
    }
  }
  tensors_.emplace_back(std::move(name), std::move(buffer));
  return tensors_.back().second;
}

const DeviceBuffer& DeviceSaved::get(std::string_view name) const {
  for (const auto& [stored_name, stored] : tensors_) {
    if (stored_name == name) return stored;
  }
  throw InternalError("device saved activations hold no tensor '" + std::string(name) + "'");
}

bool DeviceSaved::has(std::string_view name) const {
  for (const auto& entry : tensors_) {
    if (entry.first == name) return true;
  }
  return false;
}

std::int64_t DeviceSaved::bytes() const {
  std::int64_t total = input.buffer.bytes();
  for (const auto& entry : tensors_) total += entry.second.bytes();
  return total;
}

std::vector<std::string> DeviceSaved::names() const {
  std::vector<std::string> result;
  for (const auto& entry : tensors_) result.push_back(entry.first);
  return result;
}

namespace {

void check_context(const DeviceContext& context, const char* kernel) {
  SHARDPLAN_CHECK(context.pool != nullptr && context.gemm != nullptr,
                  std::string(kernel) + ": device context without a pool or a GEMM runner");
  // cuBLAS enqueues on its handle's stream: any other stream would race with the layer's own kernels.
  SHARDPLAN_CHECK(context.gemm->stream() == context.stream,
                  std::string(kernel) + ": the GEMM runner is bound to another stream than the layer's");
}

void check_batch(const DeviceBatch& batch) {
  if (batch.micro_batch < 1 || batch.seq_len < 1) {
    throw InputError("batch: expected positive micro_batch and seq_len, got " + std::to_string(batch.micro_batch) +
                     " and " + std::to_string(batch.seq_len));
  }
  SHARDPLAN_CHECK(batch.tokens != nullptr && batch.targets != nullptr, "device batch without tokens or targets");
}

bool matches(const DeviceActivations& activations, int micro_batch, int seq_len, std::int64_t width) {
  return activations.micro_batch == micro_batch && activations.seq_len == seq_len && activations.width == width &&
         activations.buffer.bytes() == activations.element_count() * static_cast<std::int64_t>(sizeof(float));
}

}  // namespace

DeviceLayerForward DeviceLayer::forward(const DeviceContext& context, const DeviceLayerParams& params,
                                        const DeviceBatch& batch, DeviceActivations input,
                                        ActivationCheckpointing checkpointing) const {
  check_context(context, kernel_name());
  check_batch(batch);
  if (kind() != LayerKind::embedding) {
    SHARDPLAN_CHECK(matches(input, batch.micro_batch, batch.seq_len, input_width()),
                    std::string(kernel_name()) + ": input activations do not match the batch and layer width");
  }
  DeviceLayerForward result;
  DeviceSaved& saved = result.saved;
  saved.checkpointing = checkpointing;
  saved.batch = batch;
  saved.input = std::move(input);
  // As LayerKernel::forward: under full checkpointing the layer runs its ordinary forward and the driver then drops
  // what it kept (released on context.stream, after the work that wrote it), so the output is bitwise the same.
  const bool full = checkpointing == ActivationCheckpointing::full;
  result.output =
      run_forward(context, params, batch, saved.input, full ? ActivationCheckpointing::none : checkpointing, saved);
  if (full) saved.keep_only_inputs();
  return result;
}

DeviceSaved DeviceLayer::recompute(const DeviceContext& context, const DeviceLayerParams& params,
                                   const DeviceSaved& checkpointed) const {
  check_context(context, kernel_name());
  DeviceSaved complete;
  complete.checkpointing = ActivationCheckpointing::none;
  complete.batch = checkpointed.batch;
  // A copy, as LayerKernel::recompute copies: the result must stand alone, whatever becomes of `checkpointed`.
  if (checkpointed.input.buffer.allocated()) complete.input = copy_activations(context, checkpointed.input);
  (void)run_forward(context, params, complete.batch, complete.input, ActivationCheckpointing::none, complete);
  return complete;
}

DeviceActivations DeviceLayer::backward(const DeviceContext& context, const DeviceLayerParams& params,
                                        const DeviceSaved& saved, const DeviceActivations& grad_output,
                                        const DeviceLayerGrads& grads, float loss_scale) const {
  check_context(context, kernel_name());
  if (kind() == LayerKind::lm_head) {
    SHARDPLAN_CHECK(!grad_output.buffer.allocated(),
                    std::string(kernel_name()) + ": the loss layer takes loss_scale, not a grad_output buffer");
  } else {
    SHARDPLAN_CHECK(matches(grad_output, saved.batch.micro_batch, saved.batch.seq_len, output_width()),
                    std::string(kernel_name()) + ": grad_output does not match the layer's output");
  }
  if (saved.checkpointing == ActivationCheckpointing::full) {
    return run_backward(context, params, recompute(context, params, saved), grad_output, grads, loss_scale);
  }
  return run_backward(context, params, saved, grad_output, grads, loss_scale);
}

}  // namespace shardplan::gpu
