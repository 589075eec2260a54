// Fragments of a StepSchedule: extraction (ops, dependencies inside, the streams waited for at the boundary, memory
// changes) and placement from a boundary state with the simulator's walk.
#include "fragment.h"

#include <algorithm>

#include "errors.h"

namespace shardplan {

bool BoundaryState::idle() const {
  return comm_busy.empty() && std::all_of(stream_free_s.begin(), stream_free_s.end(), [](double t) { return t <= 0; });
}

bool BoundaryState::at_least_as_free_as(const BoundaryState& other) const {
  for (int stream = 0; stream < kStreamCount; ++stream) {
    if (stream_free_s[static_cast<std::size_t>(stream)] > other.stream_free_s[static_cast<std::size_t>(stream)]) {
      return false;
    }
  }
  // Every busy interval inside one of the other's (both are disjoint and in time order).
  std::size_t at = 0;
  for (const TimeInterval& busy : comm_busy) {
    while (at < other.comm_busy.size() && other.comm_busy[at].end_s < busy.end_s) ++at;
    if (at == other.comm_busy.size() || other.comm_busy[at].start_s > busy.start_s) return false;
  }
  return true;
}

bool BoundaryState::operator==(const BoundaryState& other) const {
  if (stream_free_s != other.stream_free_s || comm_busy.size() != other.comm_busy.size()) return false;
  for (std::size_t i = 0; i < comm_busy.size(); ++i) {
    if (comm_busy[i].start_s != other.comm_busy[i].start_s || comm_busy[i].end_s != other.comm_busy[i].end_s) {
      return false;
    }
  }
  return true;
}

Fragment extract_fragment(const StepSchedule& schedule, int begin, int end, const OpDurations& durations,
                          const MemoryCertainty& certainty, int slot_unit, unsigned excluded) {
  SHARDPLAN_CHECK(0 <= begin && begin <= end && end <= static_cast<int>(schedule.ops.size()), "fragment out of range");
  Fragment fragment;
  // The last op of each stream before the fragment: a dependency on it is the boundary state's stream free time.
  std::array<int, kStreamCount> last_before{};
  last_before.fill(-1);
  for (int index = 0; index < begin; ++index) {
    last_before[static_cast<std::size_t>(schedule.ops[static_cast<std::size_t>(index)].stream)] = index;
  }
  for (int index = begin; index < end; ++index) {
    const Op& op = schedule.ops[static_cast<std::size_t>(index)];
    FragmentOp placed;
    placed.kind = op.kind;
    placed.stream = op.stream;
    placed.base_s = durations.base_s[static_cast<std::size_t>(index)];
    placed.overlap_slowdown = durations.overlap_slowdown[static_cast<std::size_t>(index)];
    placed.first_dep = static_cast<int>(fragment.deps.size());
    for (int dep : op.deps) {
      if (dep >= begin) {
        fragment.deps.push_back(dep - begin);
        continue;
      }
      const auto stream = static_cast<std::size_t>(schedule.ops[static_cast<std::size_t>(dep)].stream);
      // A compute op before the boundary ended by the host's clock there, which every op of the fragment waits for
      // (op_placement.cpp: an op starts once the host issued it).
      if (stream == static_cast<std::size_t>(StreamKind::compute)) continue;
      // The last op of that stream ends at the state's free time. An earlier one ended before it: when the op also
      // waits for the last, that one decides; otherwise the state does not hold its end, and leaving the dependency
      // out makes the placement a lower bound (Note [Monotone walk]).
      const bool waits_for_last =
          dep == last_before[stream] || std::find(op.deps.begin(), op.deps.end(), last_before[stream]) != op.deps.end();
      if (waits_for_last) {
        placed.boundary_streams |= 1u << stream;
      } else {
        fragment.placeable = false;
      }
    }
    placed.dep_count = static_cast<int>(fragment.deps.size()) - placed.first_dep;
    const auto counted = [&](const MemoryChange& change) {
      const int unit = change.owner_unit >= 0 ? change.owner_unit : op.unit;
      return unit < 0 || unit >= 32 || (excluded >> static_cast<unsigned>(unit) & 1u) == 0;
    };
    for (const MemoryChange& change : op.allocates) placed.start_bytes += counted(change) ? change.bytes : 0;
    for (const MemoryChange& change : op.frees_at_start) placed.start_bytes -= counted(change) ? change.bytes : 0;
    for (const MemoryChange& change : op.frees) placed.end_bytes -= counted(change) ? change.bytes : 0;
    // The reduction before it on its stream is outside the fragment: what it held comes in as FragmentInputs.
    placed.takes_held = op.frees_previous_reduction && op.hands_over_from < begin;
    // The step's final optimizer op (a unit's own, Note [Optimizer in backward], is timed as it is).
    if (op.kind == OpKind::optimizer_step && op.unit < 0) fragment.optimizer_op = static_cast<int>(fragment.ops.size());
    if (slot_unit >= 0 && op.unit == slot_unit && op.stream != StreamKind::compute) {
      fragment.slot.push_back(static_cast<int>(fragment.ops.size()));
    }
    fragment.ops.push_back(placed);
  }
  for (std::size_t index = 0; index < fragment.ops.size(); ++index) {
    if (std::find(fragment.slot.begin(), fragment.slot.end(), static_cast<int>(index)) != fragment.slot.end()) continue;
    fragment.stream_work_s[static_cast<std::size_t>(fragment.ops[index].stream)] += fragment.ops[index].base_s;
  }
  fragment.live_at_start_bytes = certainty.before(begin);
  fragment.certain_peak_bytes = std::max(fragment.live_at_start_bytes, certainty.most_at_compute_ops(begin, end));
  return fragment;
}

FragmentTiming FragmentPlacer::place(const Fragment& fragment, const BoundaryState& start,
                                     const FragmentInputs& inputs) {
  SHARDPLAN_CHECK(inputs.slot == nullptr || inputs.slot->size() == fragment.slot.size(),
                  "a fragment's slot takes as many ops as it has");
  FragmentTiming timing;
  walk_.reset();
  walk_.stream_free_s = start.stream_free_s;
  walk_.stream_free_s[static_cast<std::size_t>(StreamKind::compute)] = 0;
  for (const TimeInterval& busy : start.comm_busy) walk_.comm_busy.add(busy.start_s, busy.end_s);
  const std::size_t count = fragment.ops.size();
  placed_.resize(count);
  moments_.clear();
  std::size_t next_slot = 0;
  for (std::size_t index = 0; index < count; ++index) {
    const FragmentOp& op = fragment.ops[index];  // dependencies and stream as the fragment has them
    const FragmentOp* chosen = &op;              // durations and memory: the neighbour's in the slot
    if (inputs.slot != nullptr && next_slot < fragment.slot.size() &&
        fragment.slot[next_slot] == static_cast<int>(index)) {
      chosen = &(*inputs.slot)[next_slot++];
      SHARDPLAN_CHECK(chosen->kind == op.kind && chosen->stream == op.stream,
                      "a slot takes the neighbour's ops of the same kinds");
    }
    double deps_end = kNoDependency;
    for (int d = op.first_dep; d < op.first_dep + op.dep_count; ++d) {
      deps_end = std::max(deps_end, placed_[static_cast<std::size_t>(fragment.deps[static_cast<std::size_t>(d)])].end_s);
    }
    for (unsigned bits = op.boundary_streams, stream = 0; bits != 0; bits >>= 1, ++stream) {
      if (bits & 1u) deps_end = std::max(deps_end, start.stream_free_s[stream]);
    }
    const double base = static_cast<int>(index) == fragment.optimizer_op && inputs.optimizer_base_s >= 0
                            ? inputs.optimizer_base_s
                            : relaxation_.applied(op.kind, chosen->base_s);
    placed_[index] = walk_.place(op.kind, op.stream, base, chosen->overlap_slowdown, deps_end, nullptr, relaxation_);
    if (!inputs.with_peak) continue;
    const std::int64_t at_start = chosen->start_bytes - (op.takes_held ? inputs.held_bytes : 0);
    const int op_id = static_cast<int>(index);
    if (at_start != 0) moments_.push_back({{placed_[index].start_s, op_id, false}, at_start});
    if (chosen->end_bytes != 0) moments_.push_back({{placed_[index].end_s, op_id, true}, chosen->end_bytes});
  }
  const double end_s = walk_.stream_free_s[static_cast<std::size_t>(StreamKind::compute)];
  timing.duration_s = end_s;
  for (int stream = 0; stream < kStreamCount; ++stream) {
    if (stream == static_cast<int>(StreamKind::compute)) continue;
    timing.end.stream_free_s[static_cast<std::size_t>(stream)] =
        std::max(0.0, walk_.stream_free_s[static_cast<std::size_t>(stream)] - end_s);
  }
  timing.end.comm_busy = walk_.comm_busy.after(end_s);
  for (std::size_t index = 0; index < count; ++index) {
    if (fragment.ops[index].stream != StreamKind::compute && placed_[index].start_s < end_s) {
      timing.early_streams |= 1u << static_cast<unsigned>(fragment.ops[index].stream);
    }
  }
  // Collectives slowed beside compute (Note [Collective slowdown]) would depend on compute after the fragment:
  // placed at their own speed here, a lower bound.
  timing.exact = fragment.placeable && !relaxation_.any() && profile_.overlap_collective_slowdown <= 1.0;
  if (!inputs.with_peak) return timing;
  // The peak before the next boundary: later moments belong to what follows (whose own changes this walk lacks).
  std::sort(moments_.begin(), moments_.end(),
            [](const MemoryMoment& a, const MemoryMoment& b) { return applies_before(a.event, b.event); });
  std::int64_t live = fragment.live_at_start_bytes + inputs.extra_live_bytes + inputs.held_bytes;
  timing.peak_bytes = live;
  for (const MemoryMoment& moment : moments_) {
    if (!(moment.event.time_s < end_s)) break;
    live += moment.bytes;
    timing.peak_bytes = std::max(timing.peak_bytes, live);
  }
  return timing;
}

FragmentTiming place_fragment(const Fragment& fragment, const BoundaryState& start, const HardwareProfile& profile,
                              const FragmentInputs& inputs, const TimingRelaxation& relaxation) {
  FragmentPlacer placer(profile, relaxation);
  return placer.place(fragment, start, inputs);
}

}  // namespace shardplan
