// Support for the device layer tests: a device environment (stream, pool, cuBLAS), the test model, host ↔ device
// copies, bf16 rounding, the CPU and device runs of one layer, and the tolerance checks.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "cuda_pool_backend.h"
#include "decoder_builder.h"
#include "device_binding.h"
#include "device_layer.h"
#include "device_pool.h"
#include "gemm.h"
#include "layer_kernel.h"
#include "param_init.h"
#include "param_layout.h"
#include "runtime_fixtures.h"
#include "tracking_allocator.h"

namespace shardplan::gpu::testing {

// The test model: llama-shaped and small, with grouped-query heads (4 query heads over 2 kv heads, head_dim 8), an
// MLP wider than the hidden size, two blocks, and batches of two sequences of 8 tokens (positions wrap at 8).
constexpr int kMicroBatch = 2;
constexpr int kSeqLen = 8;
constexpr std::int64_t kVocab = 64;
constexpr std::int64_t kHidden = 32;

// attention_bias: Qwen2-style q/k/v biases (the bias paths of the linears); tied: lm_head reads the embedding.
inline ModelSpec test_model(bool tied, bool attention_bias) {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::llama;
  arch.vocab_size = kVocab;
  arch.hidden_size = kHidden;
  arch.intermediate_size = 48;
  arch.num_layers = 2;
  arch.num_heads = 4;
  arch.num_kv_heads = 2;
  arch.max_position_embeddings = 64;
  arch.tie_word_embeddings = tied;
  arch.attention_bias = attention_bias;
  return build_decoder("gpu-layer-test", arch, "test");
}

// runtime::init_model_parameters with matrices at std 0.3 (so every nonlinearity matters, as tests/runtime do) and
// the biases, which init sets to zero, overwritten with uniform values so the forward's bias add is exercised too.
inline std::vector<float> test_parameters(const runtime::ModelLayout& layout) {
  runtime::InitOptions init;
  init.seed = 5;
  init.matrix_std = 0.3;
  std::vector<float> params = runtime::init_model_parameters(layout, init);
  for (std::size_t layer = 0; layer < layout.layers.size(); ++layer) {
    for (const auto& slot : layout.layers[layer].tensors) {
      if (slot.name.find("bias") == std::string::npos) continue;
      const std::vector<float> bias =
          runtime::testing::uniform_buffer(static_cast<std::size_t>(slot.element_count), 40 + layer, -0.5f, 0.5f);
      const auto first = static_cast<std::size_t>(layout.layer_offsets_elements[layer] + slot.offset_elements);
      std::copy(bias.begin(), bias.end(), params.begin() + static_cast<std::ptrdiff_t>(first));
    }
  }
  return params;
}

// ---- bf16 on the host: fp32 → bf16 round-to-nearest-even (as __float2bfloat16_rn; NaN-free inputs here) and back.
inline std::uint16_t bf16_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
inline float float_of_bf16(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}
inline std::vector<std::uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = bf16_bits(values[i]);
  return bits;
}
inline std::vector<float> rounded_to_bf16(const std::vector<float>& values) {
  std::vector<float> rounded(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) rounded[i] = float_of_bf16(bf16_bits(values[i]));
  return rounded;
}

// ---- The device: a non-blocking stream (nothing may lean on the legacy stream's implicit synchronisation), the
// stream-ordered pool under a tracker, and a cuBLAS runner bound to the same stream.
class DeviceEnv {
 public:
  DeviceEnv() : tracker_(0, clock_), backend_(0), pool_(backend_, tracker_) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<kernels::GemmRunner>(stream_);
  }
  ~DeviceEnv() {
    gemm_.reset();
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  DeviceEnv(const DeviceEnv&) = delete;
  DeviceEnv& operator=(const DeviceEnv&) = delete;

  DeviceContext context() { return {stream_, &pool_, gemm_.get()}; }
  DevicePool& pool() { return pool_; }
  cudaStream_t stream() const { return stream_; }
  void sync() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  long long bytes(MemoryCategory category) const {
    return tracker_.current()[static_cast<std::size_t>(category)];
  }

  template <typename T>
  DeviceBuffer upload(MemoryCategory category, const std::vector<T>& values) {
    DeviceBuffer buffer = pool_.allocate(category, static_cast<std::int64_t>(values.size() * sizeof(T)),
                                         stream_ref(stream_));
    if (!values.empty()) {
      CUDA_CHECK(cudaMemcpyAsync(buffer.data(), values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice,
                                 stream_));
    }
    sync();  // `values` may go away once this returns
    return buffer;
  }
  template <typename T>
  std::vector<T> download(const void* data, std::int64_t count) {
    std::vector<T> values(static_cast<std::size_t>(count));
    if (count > 0) {
      CUDA_CHECK(cudaMemcpyAsync(values.data(), data, values.size() * sizeof(T), cudaMemcpyDeviceToHost, stream_));
    }
    sync();
    return values;
  }
  DeviceActivations upload_activations(const runtime::Activations& host) {
    return {host.micro_batch, host.seq_len, host.width, upload(MemoryCategory::activations, host.values)};
  }
  std::vector<float> download(const DeviceActivations& activations) {
    return download<float>(activations.data(), activations.element_count());
  }

 private:
  runner::StepClock clock_;
  runner::TrackingAllocator tracker_;
  CudaPoolBackend backend_;
  DevicePool pool_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kernels::GemmRunner> gemm_;
};

// ---- Tolerances.
// fp32 (Note [Device linear precision]): the device does the CPU's arithmetic in another summation order — cuBLAS
// blocks its dot products differently from Eigen, the row reductions use a tree — and expf/std::exp may differ in
// the last bit, so each element may differ by a few fp32 ulps of the terms it sums, amplified a little through the
// layers. Each element must lie within 1e-4 of its reference, relative to the reference element plus the largest
// element of the tensor (the floor keeps elements that cancel to near zero from demanding relative accuracy they
// cannot have). Reordered sums on the host stay below 4e-7 on this scale: the bound is ~250 times that, and far
// below any indexing or formula error.
inline void check_fp32_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  constexpr double rel = 1e-4;
  REQUIRE_MESSAGE(got.size() == want.size(), what << ": " << got.size() << " elements, expected " << want.size());
  double scale = 0.0;
  for (const float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  std::size_t failures = 0, worst = 0;
  double worst_excess = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const double excess = std::isfinite(g) ? std::abs(g - w) - rel * (std::abs(w) + scale) : 1e300;
    if (excess > 0.0) {
      ++failures;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  CHECK_MESSAGE(failures == 0, what << ": " << failures << " of " << got.size() << " elements off by more than "
                                    << rel << "·(|want| + max|want| = " << scale << "); worst at " << worst
                                    << ": got " << got[worst] << ", expected " << want[worst]);
}

// bf16 (Note [Device linear precision]): every GEMM's activation operand is rounded to bf16 — 8 significand bits, a
// relative error up to 2⁻⁹ ≈ 0.2% per element — while the CPU reference runs the same (bf16-representable) weights
// all in fp32, so the difference is that rounding alone: compounded through the layer (a block runs 7 GEMMs forward
// and 14 backward), amplified where sums cancel (norm-weight and bias gradients are column sums of signed terms) and,
// over the whole model, by the sharp softmax of the loss (at init std 0.3 the logits are large, so a small error in
// the last hidden state moves the probabilities, and with them every gradient, several times more). Checked per
// tensor on its norm, ‖got − want‖₂ ≤ rel·‖want‖₂: rel = 3e-2 for one layer, 6e-2 for the whole model, 1e-2 for a
// loss. The bf16 path emulated on the host (operands rounded to nearest even, fp32 accumulation) gives at most 1.4%
// (one layer), 3.6% (whole model) and 0.07% (loss) at these parameters; a wrong index, a missing term or an
// overwrite instead of an accumulation gives O(1).
inline void check_bf16_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                             double rel = 3e-2) {
  REQUIRE_MESSAGE(got.size() == want.size(), what << ": " << got.size() << " elements, expected " << want.size());
  double diff = 0.0, norm = 0.0;
  bool finite = true;
  for (std::size_t i = 0; i < got.size(); ++i) {
    finite = finite && std::isfinite(got[i]);
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  CHECK_MESSAGE(finite, what << ": non-finite values");
  CHECK_MESSAGE(std::sqrt(diff) <= rel * std::sqrt(norm), what << ": ‖got − want‖ = " << std::sqrt(diff) << " > "
                                                               << rel << "·‖want‖ = " << rel * std::sqrt(norm));
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace shardplan::gpu::testing
