// The simulator's per-op rules — an op's base duration, where it starts, how long it runs beside communication —
// shared by the whole-step walk (simulator.cpp) and the placement of schedule fragments (fragment.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "hardware_profile.h"
#include "inline_vector.h"
#include "schedule.h"

namespace shardplan {

// A layer's forward, backward (whole or one part) or recompute: the ops that run a layer pass's kernels (Op::kernels).
inline bool is_layer_pass(OpKind kind) {
  return kind == OpKind::forward || kind == OpKind::backward || kind == OpKind::recompute ||
         kind == OpKind::backward_input || kind == OpKind::backward_weight;
}

// Relaxations of the cost model that a search may ask for; none by default. Each only shortens ops, so a step timed
// with one is a lower bound of the step timed without (Note [Monotone walk]).
struct TimingRelaxation {
  bool free_all_gathers = false;     // all-gathers take no time (Note [Prefetch depth] in searcher_setting.cpp)
  bool free_collective_issue = false;  // issuing a collective costs the host nothing
  bool free_layer_compute = false;   // forward, backward and recompute ops take no time (a reductions-only bound)
  bool any() const { return free_all_gathers || free_collective_issue || free_layer_compute; }
  // The op's base duration under this relaxation.
  double applied(OpKind kind, double base_s) const {
    return (free_all_gathers && kind == OpKind::all_gather) || (free_layer_compute && is_layer_pass(kind)) ? 0.0 : base_s;
  }
};

struct TimeInterval {
  double start_s = 0;
  double end_s = 0;
  bool operator==(const TimeInterval&) const = default;
};

// Intervals inline up to four (what a fragment boundary holds: the searches copy many of them), on the heap beyond.
using IntervalList = InlineVector<TimeInterval, 4>;

// Ops that do work on the compute stream (they pay the dispatch overhead and are stretched beside communication).
bool does_compute_work(OpKind kind);

// The op's duration alone, from the cost model: compute by the roofline, collectives by the α-β model of their
// group, copies at the host link's speed; waits and frees take none.
double base_duration_s(const Op& op, int compute_element_bytes, const HardwareProfile& profile);
// A layer pass's duration from its kernels' time (pass_time_s of Op::kernels, 0 without): the kernels, then the
// zero-fill of a fresh gradient buffer (Op::zeroed_bytes). base_duration_s's, and base_durations_s's (op_durations.h).
double layer_pass_duration_s(double kernels_s, std::int64_t zeroed_bytes, const HardwareProfile& profile);
// How much slower the op runs for the part of it beside communication (Note [Overlap slowdown by kernel kind] in
// overlap_slowdown.h): a layer pass by its kernels, the device's optimizer step as memory-bound work; 1 for the host's
// optimizer step (CPU offload) and for ops that do no compute work (does_compute_work), which are never stretched.
double overlap_slowdown(const Op& op, int compute_element_bytes, const HardwareProfile& profile);

// Note [Communication busy time]: a compute op runs its overlap slowdown (overlap_slowdown above) times slower for the
// part of it during which any communication stream is busy — the union of their busy intervals. (The union, not the
// busiest single stream: compute shares the GPU with every collective in flight, and the union grows whenever any
// stream's busy time grows, which keeps the walk monotone: Note [Monotone walk].) CommBusy keeps that union as
// disjoint intervals in time order. Queries come in nondecreasing start time (compute ops run in order) and every
// added interval starts after the start of the last query (a communication op waits for the compute op issued
// before it), so intervals that end before the last query are dropped.
class CommBusy {
 public:
  void add(double start_s, double end_s);
  double overlap_s(double start_s, double end_s);
  // The busy intervals that end after `after_s`, clipped to start no earlier, shifted by −after_s.
  IntervalList after(double after_s) const;
  void clear() {
    intervals_.clear();
    first_ = 0;
  }

 private:
  IntervalList intervals_;
  std::size_t first_ = 0;  // intervals before it end before the last query started
};

// Note [Monotone walk]: every rule of the walk is nondecreasing in what it depends on — an op starts at the latest of
// its stream's free time and its dependencies' ends; a compute op's end moves by at least (2 − s)·δ ≥ 0 when its
// start moves by δ (its overlapped part changes by at most δ, stretched by s − 1 ≤ 1); a larger communication busy
// set only stretches compute more; a communication op's interval only moves later, and its stream's busy set stays
// contiguous up to it (it starts where the op before it on its stream ended or at its dependencies' end, which the
// compute stream also waited for). So for overlap slowdowns s ≤ 2 (each op's own: the catalog's are at most 1.84),
// later or longer anything before an op never makes it end earlier. The searches rely on this twice: a state that is
// at least as free (every stream free no later, busy time a subset) never leads to a slower rest of the step, and a
// relaxation only shortens it.

// The walk's clocks: each stream's free time, the host's (the compute stream's), and communication busy time.
class OpWalk {
 public:
  explicit OpWalk(const HardwareProfile& profile) : profile_(profile) {}
  // Back to time 0 with every stream free and idle.
  void reset() {
    stream_free_s.fill(0);
    stream_busy_s.fill(0);
    comm_busy.clear();
  }

  // Places an op of `kind` on `stream` with base duration `base_s` and overlap slowdown `slowdown` (overlap_slowdown
  // of the op; read only for compute work), whose dependencies end by `deps_end_s`: it starts
  // when its stream is free and its dependencies have ended (for a collective, also once the host has issued it:
  // HardwareProfile::collective_issue_overhead_s, charged to the compute stream where the schedule issues it).
  // `compute_busy`: the compute stream's working intervals of a previous pass, against which collectives slow down
  // (Note [Collective slowdown] in simulator.cpp); nullptr: they do not.
  TimeInterval place(OpKind kind, StreamKind stream, double base_s, double slowdown, double deps_end_s,
                     const std::vector<TimeInterval>* compute_busy, const TimingRelaxation& relaxation = {});

  std::array<double, kStreamCount> stream_free_s{};  // when each stream's last op ends
  std::array<double, kStreamCount> stream_busy_s{};  // how long each stream worked
  CommBusy comm_busy;

 private:
  const HardwareProfile& profile_;
};

inline constexpr double kNoDependency = -std::numeric_limits<double>::infinity();

}  // namespace shardplan
