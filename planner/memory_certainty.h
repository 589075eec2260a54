// Bytes certainly live at points of a lowered schedule whatever the timing: the memory floor's view of a fragment
// (Note [Certainly live]).
#pragma once

#include <cstdint>
#include <vector>

#include "schedule.h"

namespace shardplan {

// Note [Certainly live]: in every timing of a schedule, an op starts after everything it waits for (its
// dependencies and the ops before it on its stream, transitively) has ended, and after the host issued it — so after
// the ops before it in the schedule have started (op_placement.cpp). So just after a compute op's allocations, the
// allocations of that op and of everything it waited for have certainly happened, and no op after it has freed
// anything yet; the frees of ops before it may have. Allocations for certain less every free that may have happened
// are live in every timing — a floor that the simulator's peak never undercuts. The same holds just before a point of
// the schedule, for the last compute op before it.
class MemoryCertainty {
 public:
  // `owner` ≥ 0 counts only that unit's buffers (MemoryChange::owner_unit, or the op's unit); -1 counts all but the
  // units in `excluded` (bit u: unit u).
  explicit MemoryCertainty(const StepSchedule& schedule, int owner = -1, unsigned excluded = 0);
  // Certainly live just before op `point` (ops.size(): after the last op).
  std::int64_t before(int point) const;
  // The most bytes certainly live just after the allocations of a compute op in [begin, end).
  std::int64_t most_at_compute_ops(int begin, int end) const;

 private:
  std::vector<std::int64_t> frees_before_;  // frees (at starts and ends) of the ops before each point
  std::vector<std::int64_t> certain_after_;  // per op: allocations certain once it has allocated (compute ops)
  std::vector<std::int64_t> frees_at_start_;
  std::vector<int> last_compute_before_;    // per point: the last compute op before it (-1: none)
};

}  // namespace shardplan
