// TrackingAllocator: every runner buffer's bytes by MemoryCategory — current, peak, and the series over the step.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "memory_category.h"
#include "step_clock.h"
#include "timeline.h"

namespace shardplan::runner {

// Note [Tracked bytes]: the CPU executor computes in fp32 and only runs fp32 plans (check_executable), so a buffer's
// tracked size is its real size, elements × 4, which is also the schedule's element size for every category. The
// schedule's predicted bytes and the tracked bytes are then equal by construction for parameters, gradients and
// optimizer states; activations are tracked as what the kernels really keep (SavedActivations::bytes), which the
// memory model only approximates.
class TrackingAllocator {
 public:
  TrackingAllocator(int rank, const StepClock& clock) : rank_(rank), clock_(&clock) {}

  void allocate(MemoryCategory category, std::int64_t bytes);
  // InternalError when more is released than was allocated in the category (a runner bookkeeping bug).
  void release(MemoryCategory category, std::int64_t bytes);

  // Starts a new measurement window (one step): peaks restart from the current bytes, the series from one sample.
  void start_window();

  const MemoryByCategory& current() const { return current_; }
  long long current_total() const;
  long long peak_total() const { return peak_total_; }
  const MemoryByCategory& at_peak() const { return at_peak_; }          // the breakdown when the total peaked
  const MemoryByCategory& peak_by_category() const { return peak_by_category_; }  // each category's own maximum
  const std::vector<MemorySample>& series() const { return series_; }

  // Note [Buffer cache]: storage for TrackedBuffer, kept for reuse like PyTorch's caching allocator (the blocks a
  // step frees are the ones the next step asks for again). A fresh std::vector of a few MB is mmap'd and its pages
  // are faulted in as it is zeroed: measured on CPU ranks, a whole-model unit's 3.2 MB gradient cost ~2 ms at its
  // first backward op, 4× the cost model's fill at the memory rate (Op::zeroed_bytes). Reused storage is zeroed in
  // place. The cache holds real memory the tracked bytes do not count (PyTorch's reserved vs allocated).
  std::vector<float> take_zeroed(std::int64_t elements);
  void give_back(std::vector<float>&& storage);

 private:
  void record();

  int rank_;
  const StepClock* clock_;
  MemoryByCategory current_{};
  MemoryByCategory at_peak_{};
  MemoryByCategory peak_by_category_{};
  long long peak_total_ = 0;
  std::vector<MemorySample> series_;
  std::multimap<std::size_t, std::vector<float>> cache_;  // by element count
};

// A float buffer whose bytes are accounted to one category for exactly its lifetime (RAII), so a buffer can never be
// freed without the tracker knowing. Empty (and untracked) when default-constructed or released.
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(TrackingAllocator& tracker, MemoryCategory category, std::int64_t elements);
  TrackedBuffer(TrackedBuffer&& other) noexcept;
  TrackedBuffer& operator=(TrackedBuffer&& other) noexcept;
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  ~TrackedBuffer() { release(); }

  void release();  // frees the memory and its accounting now
  bool allocated() const { return tracker_ != nullptr; }
  std::vector<float>& values() { return values_; }
  const std::vector<float>& values() const { return values_; }
  float* data() { return values_.data(); }
  std::int64_t size() const { return static_cast<std::int64_t>(values_.size()); }
  std::int64_t bytes() const { return size() * static_cast<std::int64_t>(sizeof(float)); }

 private:
  TrackingAllocator* tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::overhead;
  std::vector<float> values_;
};

}  // namespace shardplan::runner
