// TrackingAllocator and TrackedBuffer: byte accounting by category, peaks and the memory series of a step.
#include "tracking_allocator.h"

#include <algorithm>
#include <string>

#include "errors.h"

namespace shardplan::runner {

long long TrackingAllocator::current_total() const {
  long long total = 0;
  for (long long bytes : current_) total += bytes;
  return total;
}

void TrackingAllocator::allocate(MemoryCategory category, std::int64_t bytes) {
  if (bytes < 0) throw InternalError("negative allocation of " + std::to_string(bytes) + " bytes", std::source_location::current(), rank_);
  current_[static_cast<std::size_t>(category)] += bytes;
  record();
}

void TrackingAllocator::release(MemoryCategory category, std::int64_t bytes) {
  auto& slot = current_[static_cast<std::size_t>(category)];
  if (bytes < 0 || bytes > slot) {
    throw InternalError("releasing " + std::to_string(bytes) + " bytes of " + std::string(to_string(category)) +
                            " with only " + std::to_string(slot) + " allocated",
                        std::source_location::current(), rank_);
  }
  slot -= bytes;
  record();
}

void TrackingAllocator::start_window() {
  series_.clear();
  peak_total_ = -1;  // so record() takes the current state as the first peak
  peak_by_category_ = current_;
  record();
}

void TrackingAllocator::record() {
  const long long total = current_total();
  if (total > peak_total_) {
    peak_total_ = total;
    at_peak_ = current_;
  }
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
    peak_by_category_[i] = std::max(peak_by_category_[i], current_[i]);
  }
  series_.push_back({clock_->now_s(), rank_, current_});
}

std::vector<float> TrackingAllocator::take_zeroed(std::int64_t elements) {
  const auto size = static_cast<std::size_t>(elements);
  const auto cached = cache_.find(size);
  if (cached == cache_.end()) return std::vector<float>(size, 0.0f);
  std::vector<float> storage = std::move(cached->second);
  cache_.erase(cached);
  std::fill(storage.begin(), storage.end(), 0.0f);
  return storage;
}

void TrackingAllocator::give_back(std::vector<float>&& storage) {
  if (!storage.empty()) cache_.emplace(storage.size(), std::move(storage));
}

TrackedBuffer::TrackedBuffer(TrackingAllocator& tracker, MemoryCategory category, std::int64_t elements)
    : tracker_(&tracker), category_(category), values_(tracker.take_zeroed(elements)) {
  tracker_->allocate(category_, bytes());
}

TrackedBuffer::TrackedBuffer(TrackedBuffer&& other) noexcept
    : tracker_(std::exchange(other.tracker_, nullptr)), category_(other.category_), values_(std::move(other.values_)) {
  other.values_.clear();
}

TrackedBuffer& TrackedBuffer::operator=(TrackedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    tracker_ = std::exchange(other.tracker_, nullptr);
    category_ = other.category_;
    values_ = std::move(other.values_);
    other.values_.clear();
  }
  return *this;
}

void TrackedBuffer::release() {
  if (tracker_ == nullptr) return;
  // release() can only fail on a bookkeeping bug; a destructor must not throw, and the accounting it guards is ours.
  try {
    tracker_->release(category_, bytes());
  } catch (...) {
  }
  tracker_->give_back(std::move(values_));  // Note [Buffer cache]
  tracker_ = nullptr;
  std::vector<float>().swap(values_);
}

}  // namespace shardplan::runner
