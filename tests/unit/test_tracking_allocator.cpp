// Tests of the CPU executor's TrackedBuffer: bytes accounted for exactly a buffer's lifetime, and storage reused
// zeroed from the allocator's cache (Note [Buffer cache]).
#include <doctest/doctest.h>

#include "tracking_allocator.h"

using namespace shardplan;
using namespace shardplan::runner;

TEST_CASE("tracked buffers: accounted for their lifetime; freed storage comes back zeroed for the same size") {
  const StepClock clock;
  TrackingAllocator tracker(0, clock);
  const float* first_storage = nullptr;
  {
    TrackedBuffer gradient(tracker, MemoryCategory::unsharded_grads, 1000);
    CHECK(tracker.current()[static_cast<std::size_t>(MemoryCategory::unsharded_grads)] == 4000);
    for (float& value : gradient.values()) value = 3.0f;  // dirty it, as a backward does
    first_storage = gradient.data();
  }
  CHECK(tracker.current_total() == 0);  // the cache holds the storage, the accounting does not count it
  // The same size again: the same storage, zeroed in place (no fresh pages to fault in).
  TrackedBuffer again(tracker, MemoryCategory::unsharded_grads, 1000);
  CHECK(again.data() == first_storage);
  bool all_zero = true;
  for (float value : again.values()) all_zero = all_zero && value == 0.0f;
  CHECK(all_zero);
  CHECK(tracker.current_total() == 4000);
  // Another size gets fresh zeroed storage; moving a buffer moves its accounting with it.
  TrackedBuffer other(tracker, MemoryCategory::activations, 10);
  CHECK(other.data() != first_storage);
  CHECK(other.size() == 10);
  TrackedBuffer moved = std::move(other);
  CHECK_FALSE(other.allocated());
  CHECK(tracker.current_total() == 4040);
  moved.release();
  again.release();
  CHECK(tracker.current_total() == 0);
  CHECK(tracker.peak_total() == 4040);
}
