// Fragments of a lowered StepSchedule (Note [Fragments] in schedule.h) and their placement from the state of the
// streams at their first op: the simulator's walk (op_placement.h) resumed at a fragment boundary, so a search can
// time a unit's part of a step without lowering and simulating the whole step.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "hardware_profile.h"
#include "memory_certainty.h"
#include "memory_walk.h"
#include "op_durations.h"
#include "op_placement.h"
#include "schedule.h"

namespace shardplan {

// What the ops after a fragment boundary can see of the ops before it, relative to the host's clock there (the
// compute stream's free time, time 0). Every op of a fragment starts at or after the boundary (Note [Fragments]), so
// a stream that ended before the clock is just free: its free time is stored as 0.
struct BoundaryState {
  std::array<double, kStreamCount> stream_free_s{};  // when each communication stream's last op ends (≥ 0)
  IntervalList comm_busy;  // communication busy time after the clock (Note [Communication busy time])

  bool idle() const;
  // Note [Monotone walk]: every stream free no later and busy in a subset of the time — so nothing that follows
  // ends later from this state than from `other`.
  bool at_least_as_free_as(const BoundaryState& other) const;
  bool operator==(const BoundaryState& other) const;
};

// One op of a fragment: what the walk needs to place it, and its memory effect (for the floor: fragment_memory.h).
struct FragmentOp {
  OpKind kind = OpKind::forward;
  StreamKind stream = StreamKind::compute;
  double base_s = 0;
  double overlap_slowdown = 1;  // op_durations.h: read for compute work beside communication
  int first_dep = 0;          // its dependencies inside the fragment: Fragment::deps[first_dep, first_dep + dep_count)
  int dep_count = 0;
  unsigned boundary_streams = 0;  // bit s: it waits for the last op of stream s before the fragment
  std::int64_t start_bytes = 0;   // memory change at its start: allocations less frees_at_start
  std::int64_t end_bytes = 0;     // at its end: less its frees
  bool takes_held = false;        // frees at its start what the previous reduction of its stream held
  bool operator==(const FragmentOp&) const = default;
};

struct Fragment {
  std::vector<FragmentOp> ops;
  std::vector<int> deps;
  // Every op waits, through its dependencies or its stream, for the host's clock at the boundary or for the last op
  // of a stream before it (whose end the BoundaryState holds): then placing it from the state is the walk's timing.
  bool placeable = true;
  std::int64_t live_at_start_bytes = 0;  // certainly live at the boundary (Note [Certainly live])
  std::int64_t certain_peak_bytes = 0;   // the most certainly live at its compute ops: a floor in every state
  int optimizer_op = -1;                 // the optimizer step's index in `ops`, when the fragment has it
  // Its slot (Note [Wrap fragments]): the ops of the neighbouring unit whose gather it issues, which a search replaces
  // with another unit's. Their memory is not in live_at_start or certain_peak.
  std::vector<int> slot;
  // Per stream, its ops' base durations outside the slot: each stream runs its ops one after another (Note
  // [Schedule order]), so what follows the boundary takes at least that long on it.
  std::array<double, kStreamCount> stream_work_s{};
  // Equal fragments place alike from equal states (the middle micro-batches of a step: FragmentCache::pair).
  bool operator==(const Fragment&) const = default;
};

// The ops [begin, end) of `schedule` as a fragment; `durations` holds every op's (op_durations.h). Its
// memory counts every unit's buffers but those of the units in `excluded` (bit u: unit u; `certainty` must leave out
// the same). The non-compute ops of `slot_unit` (-1: none) are the fragment's slot.
Fragment extract_fragment(const StepSchedule& schedule, int begin, int end, const OpDurations& durations,
                          const MemoryCertainty& certainty, int slot_unit = -1, unsigned excluded = 0);

// What a placement takes besides the state: the neighbour's ops for the fragment's slot, the bytes its window did not
// hold, the reductions' held buffers it takes over, and the optimizer step's duration over every unit's shard.
struct FragmentInputs {
  const std::vector<FragmentOp>* slot = nullptr;  // as many ops as Fragment::slot, of the same kinds, in order
  std::int64_t extra_live_bytes = 0;  // live at the boundary besides live_at_start (the neighbour's own bytes)
  // Bytes the reductions before the fragment hold, freed where it takes them over (0 where unknown: the peak is
  // then a floor).
  std::int64_t held_bytes = 0;
  double optimizer_base_s = -1;  // ≥ 0: the optimizer step's base duration (a window knows only its units' shards)
  bool with_peak = true;         // false: only the timing is wanted (the memory walk is skipped, peak_bytes is 0)
};

struct FragmentTiming {
  double duration_s = 0;   // the host clock's advance over the fragment: from its boundary to the next
  BoundaryState end;       // the state at the next boundary
  std::int64_t peak_bytes = 0;  // the most bytes live at any moment before its end: live_at_start + held + changes
  bool exact = true;       // the walk's timing of these ops from this state (false: a lower bound of it)
  unsigned early_streams = 0;   // bit s: an op on communication stream s starts before the fragment's end
};

// Places fragments' ops from a state (Note [Monotone walk]: from an idle state, a lower bound of any other), reusing
// its buffers from one placement to the next (a search places millions).
class FragmentPlacer {
 public:
  // With a relaxation (op_placement.h) every placement is a lower bound of the walk's timing, never `exact`.
  explicit FragmentPlacer(const HardwareProfile& profile, const TimingRelaxation& relaxation = {})
      : profile_(profile), relaxation_(relaxation), walk_(profile) {}
  FragmentTiming place(const Fragment& fragment, const BoundaryState& start, const FragmentInputs& inputs = {});

 private:
  struct MemoryMoment {
    MemoryEvent event;  // ordered as the simulator's walk orders its events (applies_before)
    std::int64_t bytes;
  };
  const HardwareProfile& profile_;
  TimingRelaxation relaxation_;
  OpWalk walk_;
  std::vector<TimeInterval> placed_;
  std::vector<MemoryMoment> moments_;
};

// One placement with a placer of its own.
FragmentTiming place_fragment(const Fragment& fragment, const BoundaryState& start, const HardwareProfile& profile,
                              const FragmentInputs& inputs = {}, const TimingRelaxation& relaxation = {});

}  // namespace shardplan
