// Tests of the GPU executor's device pool accounting, on a host fake of the stream-ordered backend: categories,
// peaks and stream-ordered release match the CPU runner's TrackingAllocator rules.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "device_pool.h"
#include "errors.h"

using namespace shardplan;
using shardplan::gpu::DeviceBuffer;
using shardplan::gpu::DevicePool;
using shardplan::gpu::StreamRef;

namespace {

// Records which stream each allocation and free was enqueued on; memory is plain host memory.
class FakeBackend : public gpu::DeviceMemoryBackend {
 public:
  void* allocate_async(std::size_t bytes, StreamRef stream) override {
    void* pointer = std::malloc(bytes);
    in_use_ += bytes;
    high_ = std::max(high_, in_use_);
    sizes_[pointer] = bytes;
    allocated_on.push_back(stream);
    return pointer;
  }
  void free_async(void* pointer, StreamRef stream) override {
    in_use_ -= sizes_.at(pointer);
    sizes_.erase(pointer);
    std::free(pointer);
    freed_on.push_back(stream);
  }
  std::size_t used_high_bytes() const override { return high_; }
  void reset_used_high() override { high_ = in_use_; }
  std::size_t in_use() const { return in_use_; }

  std::vector<StreamRef> allocated_on, freed_on;

 private:
  std::size_t in_use_ = 0, high_ = 0;
  std::map<void*, std::size_t> sizes_;
};

int stream_a = 0, stream_b = 0;  // addresses stand in for two cudaStream_t handles

}  // namespace

TEST_CASE("device pool: bytes are accounted per category for exactly a buffer's lifetime") {
  runner::StepClock clock;
  runner::TrackingAllocator tracker(0, clock);
  FakeBackend backend;
  DevicePool pool(backend, tracker);
  tracker.start_window();
  {
    DeviceBuffer params = pool.allocate(MemoryCategory::sharded_params, 4000, StreamRef{&stream_a});
    DeviceBuffer grads = pool.allocate(MemoryCategory::sharded_grads, 1000, StreamRef{&stream_a});
    CHECK(params.allocated());
    CHECK(params.data() != nullptr);
    CHECK(tracker.current()[static_cast<std::size_t>(MemoryCategory::sharded_params)] == 4000);
    CHECK(tracker.current()[static_cast<std::size_t>(MemoryCategory::sharded_grads)] == 1000);
    CHECK(tracker.current_total() == 5000);
    CHECK(pool.live_buffers() == 2);
    grads.release();
    CHECK_FALSE(grads.allocated());
    CHECK(tracker.current_total() == 4000);
    grads.release();  // idempotent: nothing is released twice
    CHECK(tracker.current_total() == 4000);
  }
  CHECK(tracker.current_total() == 0);
  CHECK(tracker.peak_total() == 5000);
  CHECK(tracker.at_peak()[static_cast<std::size_t>(MemoryCategory::sharded_grads)] == 1000);
  CHECK(pool.live_buffers() == 0);
  CHECK(backend.in_use() == 0);
  CHECK(backend.used_high_bytes() == 5000);
}

TEST_CASE("device pool: a buffer is freed on the stream of its last user (Note [Stream-ordered release])") {
  runner::StepClock clock;
  runner::TrackingAllocator tracker(0, clock);
  FakeBackend backend;
  DevicePool pool(backend, tracker);
  DeviceBuffer gathered = pool.allocate(MemoryCategory::unsharded_params, 256, StreamRef{&stream_a});
  gathered.release_after(StreamRef{&stream_b});
  REQUIRE(backend.allocated_on.size() == 1);
  REQUIRE(backend.freed_on.size() == 1);
  CHECK(backend.allocated_on[0] == StreamRef{&stream_a});
  CHECK(backend.freed_on[0] == StreamRef{&stream_b});
  {
    DeviceBuffer kept = pool.allocate(MemoryCategory::activations, 64, StreamRef{&stream_b});
  }  // dropped: freed on its allocating stream
  CHECK(backend.freed_on.back() == StreamRef{&stream_b});
}

TEST_CASE("device pool: moves transfer ownership; zero bytes allocate nothing; negative sizes are bugs") {
  runner::StepClock clock;
  runner::TrackingAllocator tracker(0, clock);
  FakeBackend backend;
  DevicePool pool(backend, tracker);
  DeviceBuffer first = pool.allocate(MemoryCategory::optimizer_states, 128, StreamRef{});
  DeviceBuffer second = std::move(first);
  CHECK_FALSE(first.allocated());
  CHECK(second.allocated());
  CHECK(second.bytes() == 128);
  DeviceBuffer third = pool.allocate(MemoryCategory::optimizer_states, 32, StreamRef{});
  third = std::move(second);  // third's own 32 bytes are released first
  CHECK(tracker.current_total() == 128);
  CHECK(backend.in_use() == 128);
  DeviceBuffer empty = pool.allocate(MemoryCategory::activations, 0, StreamRef{});
  CHECK_FALSE(empty.allocated());
  CHECK(backend.allocated_on.size() == 2);
  CHECK_THROWS_AS(pool.allocate(MemoryCategory::activations, -1, StreamRef{}), InternalError);
}
