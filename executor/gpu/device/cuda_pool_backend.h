// CudaPoolBackend: the DeviceMemoryBackend on CUDA's stream-ordered allocator (a cudaMemPool_t per device).
#pragma once

#include <cuda_runtime.h>

#include "device_pool.h"

namespace shardplan::gpu {

inline StreamRef stream_ref(cudaStream_t stream) { return StreamRef{static_cast<void*>(stream)}; }
inline cudaStream_t cuda_stream(StreamRef stream) { return static_cast<cudaStream_t>(stream.handle); }

// Uses the device's default memory pool with cudaMallocFromPoolAsync / cudaFreeAsync (CUDA Programming Guide,
// "Stream Ordered Memory Allocator"). The pool's release threshold is raised to "never" so memory freed in one step is
// reused by the next instead of going back to the driver at every synchronisation (the guide's advice for
// steady-state loops); reuse across streams follows event dependencies, which the runner's event waits provide.
class CudaPoolBackend : public DeviceMemoryBackend {
 public:
  explicit CudaPoolBackend(int device);
  void* allocate_async(std::size_t bytes, StreamRef stream) override;
  void free_async(void* pointer, StreamRef stream) override;
  std::size_t used_high_bytes() const override;  // cudaMemPoolAttrUsedMemHigh
  void reset_used_high() override;
  std::size_t reserved_bytes() const;            // cudaMemPoolAttrReservedMemCurrent: what the pool holds

 private:
  cudaMemPool_t pool_ = nullptr;
};

}  // namespace shardplan::gpu
