// The memory headroom's fits test and its description (Note [Memory headroom] in memory_headroom.h).
#include "memory_headroom.h"

#include <cmath>
#include <cstdio>

namespace shardplan {

std::int64_t MemoryHeadroom::headroom_bytes() const {
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(cap_bytes) * fraction));
}

bool MemoryHeadroom::fits(const SimulationSummary& summary) const { return fits_in_memory(summary, usable_bytes()); }

std::string MemoryHeadroom::describe() const {
  char text[96];
  std::snprintf(text, sizeof text, "%g%% headroom, %.2f GiB", 100 * fraction,
                static_cast<double>(headroom_bytes()) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

bool fits_in_memory(const SimulationSummary& summary, std::int64_t usable_bytes) {
  // device_peak_bytes is never below the allocated peak (reserved ≥ allocated less the overhead, simulator.cpp);
  // both are compared so a summary without the allocator's figures is still tested on what it has.
  return summary.peak_memory_bytes <= usable_bytes && summary.device_peak_bytes <= usable_bytes;
}

}  // namespace shardplan
