// SizeClassPool: the caching allocator's reserved memory by segment size class (Note [Allocator size classes]).
#include "caching_allocator.h"

#include <algorithm>

#include "errors.h"

namespace shardplan {

SizeClassPool::SizeClassPool(const std::vector<std::int64_t>& size_classes) {
  classes_.reserve(size_classes.size());
  for (std::int64_t size_class : size_classes) {
    SHARDPLAN_CHECK(size_class >= 0 && (classes_.empty() || classes_.back().size_class < size_class),
                    "a pool's known size classes are ascending and distinct");
    classes_.push_back(SizeClass{size_class, 0, 0, {}});
  }
}

std::size_t SizeClassPool::find(std::int64_t size_class) {
  if (last_found_ < classes_.size() && classes_[last_found_].size_class == size_class) return last_found_;
  last_found_ = static_cast<std::size_t>(
      std::lower_bound(classes_.begin(), classes_.end(), size_class,
                       [](const SizeClass& entry, std::int64_t value) { return entry.size_class < value; }) -
      classes_.begin());
  return last_found_;
}

namespace {

// Bytes placed in one region one after the other are returned to it together: one entry (a free takes the latest
// placements first, so merging neighbours changes no region's bytes), and a class's list stays short.
inline void place(std::vector<std::pair<std::size_t, std::int64_t>>& placed, std::size_t region, std::int64_t bytes) {
  if (!placed.empty() && placed.back().first == region) {
    placed.back().second += bytes;
  } else {
    placed.emplace_back(region, bytes);
  }
}

}  // namespace

void SizeClassPool::allocate(std::int64_t bytes, std::int64_t size_class) {
  SHARDPLAN_CHECK(bytes >= 0 && size_class >= 0, "allocations are non-negative");
  if (bytes == 0) return;
  const std::size_t own = find(size_class);
  if (own == classes_.size() || classes_[own].size_class != size_class) {
    // A class met for the first time, without a region yet: the placements of the classes after it move up one.
    classes_.insert(classes_.begin() + static_cast<std::ptrdiff_t>(own), SizeClass{size_class, 0, 0, {}});
    for (SizeClass& entry : classes_) {
      for (auto& placement : entry.placed) placement.first += placement.first >= own ? 1 : 0;
    }
  }
  allocate_at(bytes, own);
}

void SizeClassPool::allocate_at(std::int64_t bytes, std::size_t own) {
  SHARDPLAN_CHECK(bytes >= 0 && own < classes_.size(), "allocations are non-negative, in a known class");
  // Best fit: the smallest class whose segments can hold the lump's tensors.
  for (std::size_t at = own; at < classes_.size() && bytes > 0; ++at) {
    SizeClass& region = classes_[at];
    const std::int64_t taken = std::min(bytes, region.reserved_bytes - region.used_bytes);
    if (taken <= 0) continue;
    region.used_bytes += taken;
    place(classes_[own].placed, at, taken);
    bytes -= taken;
  }
  if (bytes == 0) return;
  // New segments of the lump's own class (cudaMalloc of the request's size).
  SizeClass& region = classes_[own];
  region.reserved_bytes += bytes;
  region.used_bytes += bytes;
  place(region.placed, own, bytes);
}

void SizeClassPool::free(std::int64_t bytes, std::int64_t size_class) {
  SHARDPLAN_CHECK(bytes >= 0 && size_class >= 0, "frees are non-negative");
  if (bytes == 0) return;
  const std::size_t own = find(size_class);
  SHARDPLAN_CHECK(own < classes_.size() && classes_[own].size_class == size_class,
                  "a free of more bytes of a size class than were allocated in it");
  free_at(bytes, own);
}

void SizeClassPool::free_at(std::int64_t bytes, std::size_t own) {
  SHARDPLAN_CHECK(bytes >= 0 && own < classes_.size(), "frees are non-negative, in a known class");
  auto& placements = classes_[own].placed;
  while (bytes > 0 && !placements.empty()) {
    auto& [region, placed_bytes] = placements.back();
    const std::int64_t returned = std::min(bytes, placed_bytes);
    classes_[region].used_bytes -= returned;
    placed_bytes -= returned;
    bytes -= returned;
    if (placed_bytes == 0) placements.pop_back();
  }
  SHARDPLAN_CHECK(bytes == 0, "a free of more bytes of a size class than were allocated in it");
}

std::int64_t SizeClassPool::reserved_bytes() const {
  std::int64_t total = 0;
  for (const SizeClass& entry : classes_) total += entry.reserved_bytes;
  return total;
}

std::int64_t SizeClassPool::allocated_bytes() const {
  std::int64_t total = 0;
  for (const SizeClass& entry : classes_) total += entry.used_bytes;
  return total;
}

}  // namespace shardplan
