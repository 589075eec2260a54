// SizeClassPool: the caching allocator's reserved memory by segment size class (Note [Allocator size classes]).
#include "caching_allocator.h"

#include <algorithm>

#include "errors.h"

namespace shardplan {

void SizeClassPool::allocate(std::int64_t bytes, std::int64_t size_class) {
  SHARDPLAN_CHECK(bytes >= 0 && size_class >= 0, "allocations are non-negative");
  if (bytes == 0) return;
  // Best fit: the smallest class whose segments can hold the lump's tensors.
  for (auto it = regions_.lower_bound(size_class); it != regions_.end() && bytes > 0; ++it) {
    Region& region = it->second;
    const std::int64_t taken = std::min(bytes, region.reserved_bytes - region.used_bytes);
    if (taken <= 0) continue;
    region.used_bytes += taken;
    placed_[size_class].emplace_back(it->first, taken);
    bytes -= taken;
  }
  if (bytes == 0) return;
  // New segments of the lump's own class (cudaMalloc of the request's size).
  Region& own = regions_[size_class];
  own.reserved_bytes += bytes;
  own.used_bytes += bytes;
  placed_[size_class].emplace_back(size_class, bytes);
}

void SizeClassPool::free(std::int64_t bytes, std::int64_t size_class) {
  SHARDPLAN_CHECK(bytes >= 0 && size_class >= 0, "frees are non-negative");
  auto& placements = placed_[size_class];
  while (bytes > 0 && !placements.empty()) {
    auto& [region_class, placed_bytes] = placements.back();
    const std::int64_t returned = std::min(bytes, placed_bytes);
    regions_[region_class].used_bytes -= returned;
    placed_bytes -= returned;
    bytes -= returned;
    if (placed_bytes == 0) placements.pop_back();
  }
  SHARDPLAN_CHECK(bytes == 0, "a free of more bytes of a size class than were allocated in it");
}

std::int64_t SizeClassPool::reserved_bytes() const {
  std::int64_t total = 0;
  for (const auto& [size_class, region] : regions_) total += region.reserved_bytes;
  return total;
}

std::int64_t SizeClassPool::allocated_bytes() const {
  std::int64_t total = 0;
  for (const auto& [size_class, region] : regions_) total += region.used_bytes;
  return total;
}

}  // namespace shardplan
