// DevicePool and DeviceBuffer: stream-ordered device memory with the CPU executor's per-category byte accounting.
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory_category.h"
#include "tracking_allocator.h"

namespace shardplan::gpu {

// A CUDA stream as the host-side code sees it: an opaque handle (cudaStream_t is a pointer), so this file and its
// tests build without CUDA. A null handle is the legacy default stream.
struct StreamRef {
  void* handle = nullptr;
  friend bool operator==(StreamRef, StreamRef) = default;
};

// Where the bytes come from. The CUDA backend (device/cuda_pool_backend.h) uses cudaMallocFromPoolAsync /
// cudaFreeAsync; tests use a host fake. Both calls are stream-ordered: an allocation is usable by work enqueued on
// `stream` after it, and a free makes the memory reusable once the work enqueued on `stream` before it completed.
class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  virtual void* allocate_async(std::size_t bytes, StreamRef stream) = 0;
  virtual void free_async(void* pointer, StreamRef stream) = 0;
  // The allocator's own high-water mark of bytes in use since the last reset (the device's physical view, which
  // the tracked bytes can be checked against), and the reset at a step's start.
  virtual std::size_t used_high_bytes() const = 0;
  virtual void reset_used_high() = 0;
};

class DevicePool;

// One device allocation owned by one category for exactly its lifetime (RAII), like the CPU runner's TrackedBuffer.
// Note [Stream-ordered release]: a buffer is freed on the stream of its LAST user (release_after), not the stream
// that allocated it: cudaFreeAsync on that stream keeps the memory alive until that user's work is done, and the
// pool hands it to another stream only after an event dependency orders the two (CUDA Programming Guide, "Stream
// Ordered Memory Allocator", cudaMemPoolReuseFollowEventDependencies). Bytes leave the accounting when release is
// issued, which is when the schedule's free happens — the same instant the CPU runner releases them.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();  // releases on the allocating stream (errors swallowed: see release_quietly)

  void release_after(StreamRef last_user);
  void release() { release_after(stream_); }
  bool allocated() const { return pool_ != nullptr; }
  void* data() const { return pointer_; }
  template <typename T>
  T* as() const { return static_cast<T*>(pointer_); }
  std::int64_t bytes() const { return bytes_; }
  MemoryCategory category() const { return category_; }

 private:
  friend class DevicePool;
  void release_quietly() noexcept;
  DeviceBuffer(DevicePool& pool, void* pointer, std::int64_t bytes, MemoryCategory category, StreamRef stream)
      : pool_(&pool), pointer_(pointer), bytes_(bytes), category_(category), stream_(stream) {}

  DevicePool* pool_ = nullptr;
  void* pointer_ = nullptr;
  std::int64_t bytes_ = 0;
  MemoryCategory category_ = MemoryCategory::overhead;
  StreamRef stream_{};
};

// Hands out DeviceBuffers from a backend and accounts every byte in a runner::TrackingAllocator — the same class,
// categories and peak/series logic as the CPU executor (Note [Tracked bytes] in tracking_allocator.h), so GPU and CPU
// runs report memory the same way and compare with the schedule's prediction the same way.
class DevicePool {
 public:
  DevicePool(DeviceMemoryBackend& backend, runner::TrackingAllocator& tracker)
      : backend_(&backend), tracker_(&tracker) {}
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // A zero-byte request returns an empty (unallocated) buffer and accounts nothing. InternalError for a negative
  // size or when the backend returns null for a non-zero size.
  DeviceBuffer allocate(MemoryCategory category, std::int64_t bytes, StreamRef stream);

  const runner::TrackingAllocator& tracker() const { return *tracker_; }
  DeviceMemoryBackend& backend() { return *backend_; }
  std::int64_t live_buffers() const { return live_buffers_; }

 private:
  friend class DeviceBuffer;
  void give_back(void* pointer, std::int64_t bytes, MemoryCategory category, StreamRef stream);

  DeviceMemoryBackend* backend_;
  runner::TrackingAllocator* tracker_;
  std::int64_t live_buffers_ = 0;
};

}  // namespace shardplan::gpu
