// MemoryEffects: a schedule's memory changes as flat arrays — each op's signed bytes at its start and end with their
// category, allocator pool and size class, and each stream's ops that change memory — built once per schedule (by
// lower_plan) and read by the simulator's memory walk (memory_walk.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "schedule.h"

namespace shardplan {

// Note [Memory effects table]: the memory walk applies every op's changes in time order, twice per op, on every
// simulation. Read from the ops, that walk chased three vectors per op (allocates, frees, frees_at_start) through
// ~300-byte Op structs and looked up each change's size class and pool; it was 44 % of a simulation (issue 32's
// profile of the 405B step). The changes do not depend on the timing, so the lowering flattens them once: per op
// a run of start deltas (frees_at_start negated, then allocates: the order walk_memory applies them in, Note
// [Reduction buffers]) and a run of end deltas (frees negated), and per stream the ops with any change, in schedule
// order — the order of that stream's memory events (Note [Memory event order] in memory_walk.cpp). Size classes are
// interned (ascending, class 0 first) so the allocator's pools index them directly. A schedule without the table
// (one built by hand) gets it from memory_effects() when simulated; code that edits a lowered schedule's ops resets
// StepSchedule::memory_effects (nothing in the project does: a schedule is lowered, then only read).
// The caching allocator's stream pools (Note [Reserved memory] in memory_walk.cpp).
inline constexpr std::size_t kAllocatorPoolCount = 3;

struct MemoryDelta {
  std::int64_t bytes = 0;   // positive: allocated; negative: freed
  std::uint8_t category = 0;  // MemoryCategory
  std::int8_t pool = -1;      // the caching allocator's stream pool (Note [Reserved memory]); -1: outside it
  std::uint16_t size_class = 0;  // index into MemoryEffects::size_classes
};

struct MemoryEffects {
  std::size_t op_count = 0;
  std::vector<std::int64_t> size_classes;  // distinct, ascending; [0] = 0 (tensors not described)
  std::vector<MemoryDelta> deltas;
  // Op i's start deltas are deltas[start_at[i], end_at[i]), its end deltas deltas[end_at[i], start_at[i + 1]).
  std::vector<std::uint32_t> start_at, end_at;
  std::array<std::vector<std::uint32_t>, kStreamCount> stream_ops;  // ops with any delta, per stream, in op order
  // Per allocator pool, whether any of its deltas has a class above 0. A pool of one class reserves its allocated
  // peak (Note [Allocator size classes] in caching_allocator.h), which the walk then keeps as a plain counter.
  std::array<bool, kAllocatorPoolCount> pool_has_classes{};

  bool starts(std::size_t op) const { return end_at[op] > start_at[op]; }
  bool ends(std::size_t op) const { return start_at[op + 1] > end_at[op]; }
};

// The caching allocator's pool of a category: 0 the default stream's, 1 the all-gather stream's, 2 the reduction
// streams'; -1 outside the allocator (Note [Reserved memory] in memory_walk.cpp).
int allocator_pool(MemoryCategory category);

MemoryEffects memory_effects(const StepSchedule& schedule);

}  // namespace shardplan
