// DevicePool / DeviceBuffer: allocation, stream-ordered release and the category accounting around them.
#include "device_pool.h"

#include <string>
#include <utility>

#include "errors.h"

namespace shardplan::gpu {

DeviceBuffer DevicePool::allocate(MemoryCategory category, std::int64_t bytes, StreamRef stream) {
  if (bytes < 0) throw InternalError("device allocation of " + std::to_string(bytes) + " bytes");
  if (bytes == 0) return DeviceBuffer{};
  void* pointer = backend_->allocate_async(static_cast<std::size_t>(bytes), stream);
  if (pointer == nullptr) {
    throw InternalError("device allocator returned no memory for " + std::to_string(bytes) + " bytes of " +
                        std::string(to_string(category)));
  }
  tracker_->allocate(category, bytes);
  ++live_buffers_;
  return DeviceBuffer(*this, pointer, bytes, category, stream);
}

void DevicePool::give_back(void* pointer, std::int64_t bytes, MemoryCategory category, StreamRef stream) {
  --live_buffers_;
  backend_->free_async(pointer, stream);  // first, so a bookkeeping error below never leaks device memory
  tracker_->release(category, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      pointer_(std::exchange(other.pointer_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      category_(other.category_),
      stream_(other.stream_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release_quietly();
    pool_ = std::exchange(other.pool_, nullptr);
    pointer_ = std::exchange(other.pointer_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    category_ = other.category_;
    stream_ = other.stream_;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release_quietly(); }

void DeviceBuffer::release_quietly() noexcept {
  // Only a bookkeeping bug can make the release throw; from a destructor or a move that must not become
  // std::terminate in the middle of unwinding another error, and the accounting it guards is ours.
  try {
    release();
  } catch (...) {
  }
}

void DeviceBuffer::release_after(StreamRef last_user) {
  if (pool_ == nullptr) return;
  DevicePool* pool = std::exchange(pool_, nullptr);
  void* pointer = std::exchange(pointer_, nullptr);
  const std::int64_t bytes = std::exchange(bytes_, 0);
  pool->give_back(pointer, bytes, category_, last_user);
}

}  // namespace shardplan::gpu
