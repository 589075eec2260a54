// walk_memory: each op's memory changes in time order (Note [Memory event order]), the bytes by category and their
// peak, and the caching allocator's stream pools (Note [Reserved memory]).
#include "memory_walk.h"

#include <algorithm>
#include <array>
#include <cstddef>

#include "caching_allocator.h"

namespace shardplan {
namespace {

// Note [Reserved memory]: PyTorch's caching allocator keeps freed blocks cached for the stream that allocated them
// and never hands them to another stream's allocations, so FSDP's reserved memory is each stream pool's own,
// summed: "the outstanding fragmentation for fsdp2 is only inter-stream fragmentation: 1) all-gather stream has its
// own memory pool, 2) default stream has its own memory pool" (verl-project/verl#3020, FSDP2's maintainer). Gathered
// parameters come from the all-gather stream, reduction buffers from the reduction streams, everything else from
// the default stream; the overhead term (CUDA context, NCCL, library workspaces) is outside the allocator. Within a
// pool, what it reserves beyond its allocated peak is the segments of smaller tensors that larger ones cannot use
// (Note [Allocator size classes] in caching_allocator.h): activations are classed by their layer's largest tensor
// (StepSchedule::activation_tensor_bytes), everything else is class 0. What the pools can reserve is bounded by the
// device: a cudaMalloc that fails makes the allocator release its unused cached segments and try again
// (c10/cuda/CUDACachingAllocator.cpp: release_cached_blocks before the retry in malloc), so segments that smaller
// tensors left are given back before the device runs out; beyond the device's memory less the overhead, only the
// allocated peak itself can push reserved.
constexpr std::size_t kAllocatorPools = 3;
int allocator_pool(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::unsharded_params:
    case MemoryCategory::root_unit: return 1;
    case MemoryCategory::comm_buffers: return 2;
    case MemoryCategory::overhead: return -1;
    default: return 0;
  }
}

std::int64_t size_class(const MemoryChange& change, const Op& op, const StepSchedule& schedule) {
  if (change.category != MemoryCategory::activations || op.layer < 0) return 0;
  const auto layer = static_cast<std::size_t>(op.layer);
  return layer < schedule.activation_tensor_bytes.size() ? schedule.activation_tensor_bytes[layer] : 0;
}

// Note [Memory event order]: memory changes apply in time order, at equal times frees first (the caching allocator
// reuses the block), then in op order: one total order, so every way of sorting gives the same walk. Each stream
// runs its ops one after another (Note [Schedule order]), so a stream's events in op order are already in time
// order — an op's start, its end, the next op's start — but where instants tie. EventMerge gathers the events per
// stream and merges the streams' runs as it hands them out; only a run out of order (an instant op that frees and
// allocates, tied with another) makes it sort all the events instead. The order is applies_before (memory_walk.h),
// which FragmentPlacer's walk of a fragment's memory sorts by too.

class EventMerge {
 public:
  EventMerge(const StepSchedule& schedule, const std::vector<double>& start_s, const std::vector<double>& end_s) {
    bool sorted = true;
    const auto add = [&](std::vector<MemoryEvent>& run, const MemoryEvent& event) {
      sorted = sorted && (run.empty() || !applies_before(event, run.back()));
      run.push_back(event);
    };
    for (std::size_t index = 0; index < schedule.ops.size(); ++index) {
      const Op& op = schedule.ops[index];
      const bool starts = !op.allocates.empty() || !op.frees_at_start.empty(), ends = !op.frees.empty();
      if (!starts && !ends) continue;
      std::vector<MemoryEvent>& run = runs_[static_cast<std::size_t>(op.stream)];
      const MemoryEvent start{start_s[index], op.id, false}, end{end_s[index], op.id, true};
      if (starts && ends && end.time_s == start.time_s) {  // an instant: its frees come first
        add(run, end);
        add(run, start);
        continue;
      }
      if (starts) add(run, start);
      if (ends) add(run, end);
    }
    if (!sorted) {
      for (std::size_t stream = 1; stream < runs_.size(); ++stream) {
        runs_[0].insert(runs_[0].end(), runs_[stream].begin(), runs_[stream].end());
        runs_[stream].clear();
      }
      std::sort(runs_[0].begin(), runs_[0].end(), applies_before);
    }
    for (std::size_t stream = 0; stream < runs_.size(); ++stream) {
      if (!runs_[stream].empty()) active_[active_count_++] = stream;
    }
  }

  // The next event in order; nullptr after the last.
  const MemoryEvent* next() {
    const MemoryEvent* first = nullptr;
    std::size_t from = 0;
    for (std::size_t at = 0; at < active_count_; ++at) {
      const std::size_t stream = active_[at];
      if (next_[stream] == runs_[stream].size()) continue;
      const MemoryEvent* head = &runs_[stream][next_[stream]];
      if (first == nullptr || applies_before(*head, *first)) {
        first = head;
        from = stream;
      }
    }
    if (first != nullptr) ++next_[from];
    return first;
  }

 private:
  std::array<std::vector<MemoryEvent>, kStreamCount> runs_;
  std::array<std::size_t, kStreamCount> next_{};
  std::array<std::size_t, kStreamCount> active_{};  // the streams with events
  std::size_t active_count_ = 0;
};

}  // namespace

MemoryWalk walk_memory(const StepSchedule& schedule, const std::vector<double>& start_s,
                       const std::vector<double>& end_s, const HardwareProfile& profile,
                       std::vector<MemorySample>* samples) {
  MemoryWalk walk;
  MemoryByCategory current = schedule.persistent;
  std::int64_t total = 0;
  for (auto bytes : current) total += bytes;
  walk.peak_bytes = total;
  walk.at_peak = current;
  std::array<SizeClassPool, kAllocatorPools> pools;
  for (std::size_t category = 0; category < kMemoryCategoryCount; ++category) {
    const auto pool = allocator_pool(static_cast<MemoryCategory>(category));
    if (pool >= 0) pools[static_cast<std::size_t>(pool)].allocate(current[category], 0);
  }
  const auto sample = [&](double time_s) {
    if (samples == nullptr) return;
    if (!samples->empty() && samples->back().time_s == time_s) {
      samples->back().bytes = current;
    } else {
      samples->push_back({time_s, 0, current});
    }
  };
  sample(0.0);
  EventMerge events(schedule, start_s, end_s);
  while (const MemoryEvent* event = events.next()) {
    const Op& op = schedule.ops[static_cast<std::size_t>(event->op_id)];
    const auto apply = [&](const std::vector<MemoryChange>& changes, int sign) {
      for (const MemoryChange& change : changes) {
        current[static_cast<std::size_t>(change.category)] += sign * change.bytes;
        total += sign * change.bytes;
        const auto pool = allocator_pool(change.category);
        if (pool < 0) continue;
        SizeClassPool& allocator = pools[static_cast<std::size_t>(pool)];
        if (sign > 0) {
          allocator.allocate(change.bytes, size_class(change, op, schedule));
        } else {
          allocator.free(change.bytes, size_class(change, op, schedule));
        }
      }
    };
    if (event->is_free) {
      apply(op.frees, -1);
    } else {
      apply(op.frees_at_start, -1);  // Note [Reduction buffers] (schedule.h): released before the op allocates
      apply(op.allocates, +1);
    }
    if (total > walk.peak_bytes) {
      walk.peak_bytes = total;
      walk.at_peak = current;
      walk.peak_op_id = event->op_id;
    }
    sample(event->time_s);
  }
  for (const SizeClassPool& pool : pools) walk.reserved_peak_bytes += pool.reserved_bytes();
  const std::int64_t overhead_bytes = schedule.persistent[static_cast<std::size_t>(MemoryCategory::overhead)];
  if (profile.device_memory_bytes > 0) {  // Note [Reserved memory]: the retry after a failed cudaMalloc
    walk.reserved_peak_bytes = std::min(walk.reserved_peak_bytes, std::max(profile.device_memory_bytes - overhead_bytes,
                                                                           walk.peak_bytes - overhead_bytes));
  }
  walk.device_peak_bytes = walk.reserved_peak_bytes + overhead_bytes;
  return walk;
}

}  // namespace shardplan
