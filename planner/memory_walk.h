// walk_memory: the simulator's memory walk — every op's allocations and frees applied in time order to the bytes by
// category and to the caching allocator's stream pools (simulator.cpp) — and the order of memory events it applies,
// which the fragment placer's walk (fragment.cpp) applies too.
#pragma once

#include <cstdint>
#include <vector>

#include "hardware_profile.h"
#include "memory_category.h"
#include "schedule.h"
#include "timeline.h"

namespace shardplan {

// One op's memory changes at an instant: at its start (frees_at_start, then allocations) or at its end (its frees).
struct MemoryEvent {
  double time_s;
  int op_id;     // an op's index in the schedule; any numbering in schedule order orders alike
  bool is_free;  // the op's end
};

// Note [Memory event order] (memory_walk.cpp): time, at equal times frees first, then op order.
inline bool applies_before(const MemoryEvent& a, const MemoryEvent& b) {
  if (a.time_s != b.time_s) return a.time_s < b.time_s;
  if (a.is_free != b.is_free) return a.is_free;
  return a.op_id < b.op_id;
}

struct MemoryWalk {
  std::int64_t peak_bytes = 0;  // allocated, persistent bytes included
  MemoryByCategory at_peak{};
  int peak_op_id = -1;  // the op whose changes reached the peak (-1: the persistent bytes alone)
  // Note [Reserved memory] (memory_walk.cpp): the pools' reserved peak within the device, and with the overhead term.
  std::int64_t reserved_peak_bytes = 0;
  std::int64_t device_peak_bytes = 0;
};

// `start_s`, `end_s`: each op's interval as placed. `samples`, when given, receives the bytes by category after each
// instant's changes, from time 0.
MemoryWalk walk_memory(const StepSchedule& schedule, const std::vector<double>& start_s,
                       const std::vector<double>& end_s, const HardwareProfile& profile,
                       std::vector<MemorySample>* samples);

}  // namespace shardplan
