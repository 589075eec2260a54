// Support for the GPU kernel tests: a stream, device buffers, deterministic data, bf16 rounding, tolerance checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "counter_rng.h"
#include "cuda_check.h"
#include "layer_kernel.h"

namespace shardplan::gpu::kernels::testing {

// The test model: small, but with grouped-query heads (4 query heads over 2 kv heads), two sequences (so positions
// wrap: token t sits at t mod seq_len) and an MLP wider than the hidden size.
constexpr int kMicroBatch = 2;
constexpr int kSeqLen = 16;
constexpr std::int64_t kTokens = std::int64_t{kMicroBatch} * kSeqLen;
constexpr std::int64_t kHidden = 32;
constexpr std::int64_t kHeads = 4;
constexpr std::int64_t kKvHeads = 2;
constexpr std::int64_t kHeadDim = kHidden / kHeads;
constexpr std::int64_t kIntermediate = 48;
constexpr std::int64_t kVocab = 64;

// Note [Identity input]: the CPU runtime exposes some intermediate gradients (dq, dk, dv of attention; d_gate, d_up
// of the MLP; dL/dlogits of the loss) only through the weight gradient of the projection that consumes them,
// grad_W += dYᵀ·X. With X the identity (tokens == hidden, hence kTokens == kHidden above) that gradient is exactly
// dYᵀ — multiplying by 1 and adding zeros is exact in any summation order — so the tests read the CPU's own
// intermediate out of grad_W transposed, instead of re-implementing the backward.
static_assert(kTokens == kHidden, "Note [Identity input] needs a square [tokens × hidden] input");

inline runtime::DecoderDims test_dims() {
  runtime::DecoderDims dims;
  dims.vocab_size = kVocab;
  dims.hidden_size = kHidden;
  dims.intermediate_size = kIntermediate;
  dims.num_heads = kHeads;
  dims.num_kv_heads = kKvHeads;
  dims.head_dim = kHeadDim;
  dims.max_positions = kSeqLen;
  return dims;
}

// A non-blocking stream: the kernels must not rely on the legacy default stream's implicit synchronisation.
class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator cudaStream_t() const { return stream_; }
  void sync() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// A device array whose copies are ordered on the test's stream (after the kernels enqueued before them).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer(const Stream& stream, std::size_t count) : stream_(stream), count_(count) {
    CUDA_CHECK(cudaMalloc(&data_, std::max<std::size_t>(count, 1) * sizeof(T)));
  }
  DeviceBuffer(const Stream& stream, const std::vector<T>& values) : DeviceBuffer(stream, values.size()) {
    upload(values);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  std::size_t size() const { return count_; }
  void upload(const std::vector<T>& values) {
    REQUIRE(values.size() == count_);
    CUDA_CHECK(cudaMemcpyAsync(data_, values.data(), count_ * sizeof(T), cudaMemcpyHostToDevice, stream_));
    stream_.sync();
  }
  std::vector<T> download() const {
    std::vector<T> values(count_);
    CUDA_CHECK(cudaMemcpyAsync(values.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost, stream_));
    stream_.sync();
    return values;
  }

 private:
  const Stream& stream_;
  std::size_t count_;
  T* data_ = nullptr;
};

// bf16 travels as its bit pattern on the host; the kernels see the same bytes as __nv_bfloat16.
using Bf16Buffer = DeviceBuffer<std::uint16_t>;
inline __nv_bfloat16* bf16_data(const Bf16Buffer& buffer) { return reinterpret_cast<__nv_bfloat16*>(buffer.get()); }

inline std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
inline float float_of_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
// fp32 → bf16 round-to-nearest-even: keep the top 16 bits, adding half an ulp of bf16 minus one plus the kept lowest
// bit, so an exact tie rounds to the even neighbour (the IEEE 754 default rounding, as __float2bfloat16_rn; Intel,
// "BFLOAT16 – Hardware Numerics Definition", 2018). NaN stays a quiet NaN.
inline std::uint16_t bf16_bits_rne(float value) {
  const std::uint32_t bits = bits_of(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
// bf16 → fp32 is exact: the bf16 bits are the fp32's top half.
inline float float_of_bf16(std::uint16_t bits) { return float_of_bits(static_cast<std::uint32_t>(bits) << 16); }
inline float round_to_bf16(float value) { return float_of_bf16(bf16_bits_rne(value)); }

// Uniform in [lo, hi) from the counter stream (seed, index), as tests/runtime: identical data on every platform.
inline float uniform_at(std::uint64_t seed, std::uint64_t index, float lo, float hi) {
  const double unit = static_cast<double>(runtime::splitmix64(seed, index) >> 11) / 9007199254740992.0;
  return static_cast<float>(lo + (hi - lo) * unit);
}
inline std::vector<float> uniform_buffer(std::size_t count, std::uint64_t seed, float lo, float hi) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = uniform_at(seed, i, lo, hi);
  return values;
}
inline std::vector<float> identity(std::int64_t n) {
  std::vector<float> values(static_cast<std::size_t>(n * n), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i * n + i)] = 1.0f;
  return values;
}
// [rows × cols] row-major → [cols × rows].
inline std::vector<float> transposed(const std::vector<float>& values, std::int64_t rows, std::int64_t cols) {
  std::vector<float> out(values.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      out[static_cast<std::size_t>(c * rows + r)] = values[static_cast<std::size_t>(r * cols + c)];
    }
  }
  return out;
}

// Token ids in [0, vocab) from the counter stream, with repeats (the embedding backward must sum them).
inline std::vector<std::int32_t> random_ids(std::int64_t count, std::int64_t vocab, std::uint64_t seed) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int32_t>(runtime::splitmix64(seed, i) % static_cast<std::uint64_t>(vocab));
  }
  ids[3] = ids[0];
  ids[ids.size() - 1] = ids[0];
  return ids;
}

// One layer's parameters (or gradients) bound to caller-owned buffers: {name, shape, buffer} per tensor.
struct NamedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float>* values;
};
inline runtime::LayerParams bind(const std::vector<NamedTensor>& tensors) {
  runtime::LayerParams params;
  for (const NamedTensor& t : tensors) {
    params.tensors.push_back({t.name, t.shape, t.values->data(), static_cast<std::int64_t>(t.values->size())});
  }
  return params;
}

// Every element within abs + rel·|want| of the reference (and NaN exactly where the reference is NaN); reports the
// number of failures and the worst element.
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                        const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what << ": " << got.size() << " elements, expected " << want.size());
  std::size_t failures = 0, worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    double excess = 0.0;  // > 0: outside the tolerance
    if (std::isnan(g) || std::isnan(w) || std::isinf(g) || std::isinf(w)) {
      const bool same = (std::isnan(g) && std::isnan(w)) || g == w;
      excess = same ? 0.0 : 1e300;
    } else {
      excess = std::abs(g - w) - (abs + rel * std::abs(w));
    }
    if (excess > 0.0) {
      ++failures;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (failures > 0) {
    std::ostringstream message;
    message.precision(9);
    message << what << ": " << failures << " of " << got.size() << " elements outside rel " << rel << " / abs "
            << abs << "; worst at " << worst << ": got " << got[worst] << ", expected " << want[worst];
    FAIL_CHECK(message.str());
  }
}

}  // namespace shardplan::gpu::kernels::testing
