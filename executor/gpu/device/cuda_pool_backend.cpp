// CudaPoolBackend: cudaMallocFromPoolAsync / cudaFreeAsync on the device's default pool, and its watermarks.
#include "cuda_pool_backend.h"

#include <cstdint>

#include "cuda_check.h"

namespace shardplan::gpu {

CudaPoolBackend::CudaPoolBackend(int device) {
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, device));
  std::uint64_t keep_everything = UINT64_MAX;
  CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_everything));
}

void* CudaPoolBackend::allocate_async(std::size_t bytes, StreamRef stream) {
  void* pointer = nullptr;
  CUDA_CHECK(cudaMallocFromPoolAsync(&pointer, bytes, pool_, cuda_stream(stream)));
  return pointer;
}

void CudaPoolBackend::free_async(void* pointer, StreamRef stream) {
  CUDA_CHECK(cudaFreeAsync(pointer, cuda_stream(stream)));
}

std::size_t CudaPoolBackend::used_high_bytes() const {
  std::uint64_t bytes = 0;
  CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &bytes));
  return static_cast<std::size_t>(bytes);
}

void CudaPoolBackend::reset_used_high() {
  std::uint64_t zero = 0;  // the only value the attribute accepts: resets the mark to the current use
  CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
}

std::size_t CudaPoolBackend::reserved_bytes() const {
  std::uint64_t bytes = 0;
  CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &bytes));
  return static_cast<std::size_t>(bytes);
}

}  // namespace shardplan::gpu
