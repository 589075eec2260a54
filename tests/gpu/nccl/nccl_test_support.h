// Device buffers, bf16 on the host, and the world communicator for the `gpu` suite's NCCL tests.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../../mpi/mpi_test_support.h"  // value(), rank_data(), kOddCounts, kSentinel: the mpi suite's data
#include "cuda_check.h"
#include "nccl_communicator.h"

namespace shardplan::gpu::testing {

using comm::testing::kOddCounts;
using comm::testing::kSentinel;
using comm::testing::rank_data;
using comm::testing::value;
using comm::testing::world_rank;
using comm::testing::world_size;

// Elements past the end of every receive buffer, kept at a sentinel to catch writes out of range.
inline constexpr std::size_t kGuard = 17;

// cudaMalloc'd elements, freed on scope exit. Uploads synchronise the device: cudaMemcpy runs on the legacy default
// stream, which the communicator's non-blocking streams do not wait for (Note [Collective streams]).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count_ * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  std::size_t size() const { return count_; }

  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == count_);
    if (count_ > 0) CUDA_CHECK(cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  // Call after the collective's handle completed (or its stream was synchronised).
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// `data` followed by kGuard sentinels.
inline std::vector<float> with_guard(std::vector<float> data) {
  data.insert(data.end(), kGuard, kSentinel);
  return data;
}

// bf16 is the high half of an IEEE float; the tests only use small integers, which bf16 holds exactly, so truncation
// is exact here.
inline std::uint16_t to_bf16(float x) { return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x) >> 16); }
inline float from_bf16(std::uint16_t x) { return std::bit_cast<float>(static_cast<std::uint32_t>(x) << 16); }
inline std::vector<std::uint16_t> to_bf16(const std::vector<float>& xs) {
  std::vector<std::uint16_t> out;
  for (const float x : xs) out.push_back(to_bf16(x));
  return out;
}
inline std::vector<float> from_bf16(const std::vector<std::uint16_t>& xs) {
  std::vector<float> out;
  for (const std::uint16_t x : xs) out.push_back(from_bf16(x));
  return out;
}

// Integers in [-8, 8]: any partial sum over up to 32 ranks stays an integer below 256 in magnitude, exact in bf16, so
// a reduction in bf16 gives the CPU reference's bits whatever its order.
inline float small_value(int rank, std::size_t i, int salt = 0) {
  return static_cast<float>(static_cast<int>((static_cast<std::size_t>(rank) * 3 + i * 5 +
                                              static_cast<std::size_t>(salt) * 7) % 17) - 8);
}
inline std::vector<float> small_data(int rank, std::size_t count, int salt = 0) {
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = small_value(rank, i, salt);
  return data;
}

// The CPU reference of one element of a reduction.
inline float reduce(comm::ReduceOp op, float a, float b) {
  switch (op) {
    case comm::ReduceOp::sum: return a + b;
    case comm::ReduceOp::max: return a > b ? a : b;
    case comm::ReduceOp::min: return a < b ? a : b;
  }
  return a;
}
inline constexpr comm::ReduceOp kOps[] = {comm::ReduceOp::sum, comm::ReduceOp::max, comm::ReduceOp::min};

// rank r's `count` elements one after the other, r = 0..ranks-1: what an all-gather of them returns.
template <typename Data>
std::vector<float> concatenated(int ranks, std::size_t count, int salt, Data data) {
  std::vector<float> all;
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> part = data(r, count, salt);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

}  // namespace shardplan::gpu::testing
