// DeviceLayer: the GPU executor's layer driver (forward, backward, recompute on device buffers) and the value types
// it passes: device parameters and gradients of one layer, a device batch, device activations and saved state.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device_pool.h"
#include "model_spec.h"

namespace shardplan::gpu {

namespace kernels {
class GemmRunner;
}

enum class DeviceDType { f32, bf16 };
const char* to_string(DeviceDType dtype);
inline std::int64_t element_bytes(DeviceDType dtype) { return dtype == DeviceDType::f32 ? 4 : 2; }

// Where a layer's work goes: one stream (the compute stream), the pool every buffer comes from (so activations are
// accounted by category exactly as on the CPU), and the cuBLAS wrapper bound to that stream.
struct DeviceContext {
  cudaStream_t stream = nullptr;
  DevicePool* pool = nullptr;
  kernels::GemmRunner* gemm = nullptr;
};

// One tensor of a layer inside a gathered flat parameter on the device (Note [Flat layout] in param_layout.h: the
// same order, shapes and offsets as on the CPU). `dtype` is the gathered dtype: f32 for fp32 plans, bf16 for
// bf16-mixed-fp32-reduce plans; a layer that needs fp32 values of a bf16 tensor (a norm weight) converts them itself.
struct DeviceTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  DeviceDType dtype = DeviceDType::f32;
  std::int64_t element_count = 0;
};

struct DeviceLayerParams {
  std::vector<DeviceTensor> tensors;
  // InternalError naming the tensor when the layout has no such tensor (a kernel/spec mismatch).
  const DeviceTensor& tensor(std::string_view name) const;
  const DeviceTensor* find(std::string_view name) const;  // nullptr when absent (optional tensors: biases)
};

// Parameter gradients of one layer, fp32, in the same layout as its parameters; backward ADDS into them.
struct DeviceGradTensor {
  std::string name;
  float* data = nullptr;
  std::int64_t element_count = 0;
};
struct DeviceLayerGrads {
  std::vector<DeviceGradTensor> tensors;
  float* tensor(std::string_view name) const;
  float* find(std::string_view name) const;  // nullptr when absent (optional tensors: biases)
};

// One micro-batch's token ids and next-token targets on the device, [micro_batch × seq_len] row-major int32.
struct DeviceBatch {
  int micro_batch = 0;
  int seq_len = 0;
  const std::int32_t* tokens = nullptr;
  const std::int32_t* targets = nullptr;
  std::int64_t token_count() const { return static_cast<std::int64_t>(micro_batch) * seq_len; }
};

// Hidden states [tokens × width], fp32, in an activations-category buffer. The loss layer's output is one float, the
// mean loss of the micro-batch.
struct DeviceActivations {
  int micro_batch = 0;
  int seq_len = 0;
  std::int64_t width = 0;
  DeviceBuffer buffer;
  float* data() const { return buffer.as<float>(); }
  std::int64_t token_count() const { return static_cast<std::int64_t>(micro_batch) * seq_len; }
  std::int64_t element_count() const { return token_count() * width; }
};

// What one layer's forward keeps for its backward (as runtime::SavedActivations): its input, the batch ids it read,
// and named tensors (all in activations-category buffers), dropped except the input under full checkpointing.
class DeviceSaved {
 public:
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
  DeviceActivations input;   // empty for the embedding
  DeviceBatch batch;         // the ids the layer read (not owned: the runner keeps the batch for the whole step)

  // Stores `buffer` under `name` (replacing an older tensor of that name) and returns the stored buffer; the reference
  // stays valid while this object lives (a deque never moves its elements on push_back, as in SavedActivations).
  DeviceBuffer& put(std::string name, DeviceBuffer buffer);
  const DeviceBuffer& get(std::string_view name) const;  // InternalError when forward did not keep it
  bool has(std::string_view name) const;
  void keep_only_inputs() { tensors_.clear(); }
  // Bytes held: the input and every named tensor (the batch ids are the runner's, not counted here).
  std::int64_t bytes() const;
  std::vector<std::string> names() const;

 private:
  std::deque<std::pair<std::string, DeviceBuffer>> tensors_;
};

struct DeviceLayerForward {
  DeviceActivations output;
  DeviceSaved saved;
};

// Note [Device layer driver]: as runtime::LayerKernel (Note [Kernel driver]): forward() and backward() are the same
// for every kind, full checkpointing is handled here once (forward keeps only the input; backward recomputes from it
// with the same code first), and each kind implements run_forward / run_backward. All work is enqueued on
// context.stream; nothing here synchronises with the host. context.gemm must be bound to context.stream (checked:
// cuBLAS would otherwise race with the layer's kernels). Every buffer a layer allocates — output, saved tensors,
// scratch — is allocated on context.stream and, by DeviceBuffer's default, released there; so a DeviceSaved dropped
// after a backward on another stream than its forward's needs release_after (Note [Stream-ordered release]), or
// the two streams ordered by an event.
class DeviceLayer {
 public:
  virtual ~DeviceLayer() = default;
  virtual LayerKind kind() const = 0;
  virtual const char* kernel_name() const = 0;
  virtual std::int64_t output_width() const = 0;

  DeviceLayerForward forward(const DeviceContext& context, const DeviceLayerParams& params, const DeviceBatch& batch,
                             DeviceActivations input, ActivationCheckpointing checkpointing) const;
  // Returns dL/d(input) (empty for the embedding) and adds the parameter gradients into `grads`. For the loss layer
  // `grad_output` is empty and `loss_scale` is dL/d(mean loss) (1, or 1/k over k accumulated micro-batches).
  DeviceActivations backward(const DeviceContext& context, const DeviceLayerParams& params, const DeviceSaved& saved,
                             const DeviceActivations& grad_output, const DeviceLayerGrads& grads,
                             float loss_scale = 1.0f) const;
  DeviceSaved recompute(const DeviceContext& context, const DeviceLayerParams& params,
                        const DeviceSaved& checkpointed) const;

 protected:
  virtual DeviceActivations run_forward(const DeviceContext& context, const DeviceLayerParams& params,
                                        const DeviceBatch& batch, const DeviceActivations& input,
                                        ActivationCheckpointing checkpointing, DeviceSaved& saved) const = 0;
  virtual DeviceActivations run_backward(const DeviceContext& context, const DeviceLayerParams& params,
                                         const DeviceSaved& saved, const DeviceActivations& grad_output,
                                         const DeviceLayerGrads& grads, float loss_scale) const = 0;
  // The width every non-embedding layer expects of its input (0 for the embedding, which reads token ids).
  virtual std::int64_t input_width() const = 0;
};

// The device layer for model.layers[index] (llama family: embedding, decoder block, final RMSNorm, lm_head + loss);
// InputError naming the model when the architecture is not one the GPU executor runs.
std::unique_ptr<DeviceLayer> make_device_layer(const ModelSpec& model, std::size_t index);

}  // namespace shardplan::gpu
