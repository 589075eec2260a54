// walk_memory: each op's memory changes in time order (Note [Memory event order]), the bytes by category and their
// peak, and the caching allocator's stream pools (Note [Reserved memory]).
#include "memory_walk.h"

#include <algorithm>
#include <array>
#include <cstddef>

#include "caching_allocator.h"
#include "errors.h"
#include "memory_effects.h"

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
// Note [Memory event order]: memory changes apply in time order, at equal times frees first (the caching allocator
// reuses the block), then in op order: one total order, so every way of sorting gives the same walk. Each stream
// runs its ops one after another (Note [Schedule order]), so a stream's events in op order are already in time
// order — an op's start, its end, the next op's start — but where instants tie. StreamEvents hands out one stream's
// events in op order (MemoryEffects::stream_ops) and the walk merges the streams; only a stream whose events come
// out of order (an instant op that frees and allocates, tied with another) makes the walk sort all the events
// instead. The order is applies_before (memory_walk.h), which FragmentPlacer's walk of a fragment's memory sorts by
// too.
class StreamEvents {
 public:
  StreamEvents(const std::vector<std::uint32_t>& ops, const MemoryEffects& effects, const std::vector<double>& start_s,
               const std::vector<double>& end_s)
      : ops_(ops), effects_(effects), start_s_(start_s), end_s_(end_s) {
    load();
  }
  bool done() const { return at_ == ops_.size(); }
  MemoryEvent head() const { return {time_s_, op_, is_free_}; }
  // To the next event; false when it applies before the one just handed out (the stream is out of order).
  bool advance() {
    const MemoryEvent previous = head();
    if (++phase_ == phases_) {
      ++at_;
      phase_ = 0;
    }
    if (done()) return true;
    load();
    return !applies_before(head(), previous);
  }

 private:
  // The current op's events: its start (if it changes memory there), then its end; an instant's end first. (The
  // head is kept field by field: built as a whole struct, its byte-sized flag stalled the loads that read it back.)
  void load() {
    const std::size_t op = ops_[at_];
    const bool starts = effects_.starts(op), ends = effects_.ends(op);
    phases_ = starts && ends ? 2 : 1;
    const bool end_first = !starts || (ends && end_s_[op] == start_s_[op]);
    is_free_ = (phase_ == 0) == end_first;
    time_s_ = is_free_ ? end_s_[op] : start_s_[op];
    op_ = static_cast<int>(op);
  }

  const std::vector<std::uint32_t>& ops_;
  const MemoryEffects& effects_;
  const std::vector<double>& start_s_;
  const std::vector<double>& end_s_;
  std::size_t at_ = 0;
  int phase_ = 0, phases_ = 1;
  double time_s_ = 0;
  int op_ = 0;
  bool is_free_ = false;
};

}  // namespace

MemoryWalk walk_memory(const StepSchedule& schedule, const std::vector<double>& start_s,
                       const std::vector<double>& end_s, const HardwareProfile& profile,
                       std::vector<MemorySample>* samples) {
  // Note [Memory effects table]: the lowering's table, or one made here for a schedule built by hand.
  MemoryEffects made;
  const MemoryEffects* effects = schedule.memory_effects.get();
  if (effects == nullptr || effects->op_count != schedule.ops.size()) {
    made = memory_effects(schedule);
    effects = &made;
  }
  const std::vector<MemoryDelta>& deltas = effects->deltas;

  MemoryWalk walk;
  MemoryByCategory current{};
  std::int64_t total = 0;
  // Each pool: its size classes where it has any, else its allocated bytes and their peak (what it then reserves).
  std::array<SizeClassPool, kAllocatorPoolCount> pools;
  std::array<std::int64_t, kAllocatorPoolCount> pool_allocated{}, pool_peak{};
  const std::size_t samples_before = samples != nullptr ? samples->size() : 0;
  const auto restart = [&] {
    current = schedule.persistent;
    total = 0;
    for (auto bytes : current) total += bytes;
    walk.peak_bytes = total;
    walk.at_peak = current;
    walk.peak_op_id = -1;
    pools.fill(SizeClassPool(effects->size_classes));
    pool_allocated.fill(0);
    for (std::size_t category = 0; category < kMemoryCategoryCount; ++category) {
      const auto pool = allocator_pool(static_cast<MemoryCategory>(category));
      if (pool < 0) continue;
      pools[static_cast<std::size_t>(pool)].allocate_at(current[category], 0);
      pool_allocated[static_cast<std::size_t>(pool)] += current[category];
    }
    pool_peak = pool_allocated;
    if (samples != nullptr) samples->resize(samples_before);
  };
  const auto sample = [&](double time_s) {
    if (samples == nullptr) return;
    if (!samples->empty() && samples->back().time_s == time_s) {
      samples->back().bytes = current;
    } else {
      samples->push_back({time_s, 0, current});
    }
  };
  const auto apply = [&](const MemoryEvent& event) {
    const auto op = static_cast<std::size_t>(event.op_id);
    const std::uint32_t first = event.is_free ? effects->end_at[op] : effects->start_at[op];
    const std::uint32_t last = event.is_free ? effects->start_at[op + 1] : effects->end_at[op];
    for (std::uint32_t at = first; at < last; ++at) {
      const MemoryDelta& delta = deltas[at];
      current[delta.category] += delta.bytes;
      total += delta.bytes;
      if (delta.pool < 0) continue;
      const auto pool = static_cast<std::size_t>(delta.pool);
      if (!effects->pool_has_classes[pool]) {
        pool_allocated[pool] += delta.bytes;
        pool_peak[pool] = std::max(pool_peak[pool], pool_allocated[pool]);
        SHARDPLAN_CHECK(pool_allocated[pool] >= 0, "a free of more bytes than an allocator pool holds");
        continue;
      }
      SizeClassPool& allocator = pools[pool];
      if (delta.bytes > 0) {
        allocator.allocate_at(delta.bytes, delta.size_class);
      } else {
        allocator.free_at(-delta.bytes, delta.size_class);
      }
    }
    if (total > walk.peak_bytes) {
      walk.peak_bytes = total;
      walk.at_peak = current;
      walk.peak_op_id = event.op_id;
    }
    sample(event.time_s);
  };

  // The streams' runs merged as they are handed out (Note [Memory event order]).
  restart();
  sample(0.0);
  std::array<StreamEvents*, kStreamCount> active{};
  std::size_t active_count = 0;
  std::vector<StreamEvents> streams;
  streams.reserve(kStreamCount);
  for (const std::vector<std::uint32_t>& ops : effects->stream_ops) {
    if (ops.empty()) continue;
    streams.emplace_back(ops, *effects, start_s, end_s);
    active[active_count++] = &streams.back();
  }
  bool in_order = true;
  while (active_count > 0 && in_order) {
    std::size_t first = 0;
    for (std::size_t at = 1; at < active_count; ++at) {
      if (applies_before(active[at]->head(), active[first]->head())) first = at;
    }
    apply(active[first]->head());
    in_order = active[first]->advance();
    if (active[first]->done()) active[first] = active[--active_count];
  }
  if (!in_order) {  // a stream out of order: every event, sorted
    std::vector<MemoryEvent> events;
    for (const std::vector<std::uint32_t>& ops : effects->stream_ops) {
      for (std::uint32_t op : ops) {
        if (effects->starts(op)) events.push_back({start_s[op], static_cast<int>(op), false});
        if (effects->ends(op)) events.push_back({end_s[op], static_cast<int>(op), true});
      }
    }
    std::sort(events.begin(), events.end(), applies_before);
    restart();
    sample(0.0);
    for (const MemoryEvent& event : events) apply(event);
  }

  for (std::size_t pool = 0; pool < kAllocatorPoolCount; ++pool) {
    walk.reserved_peak_bytes += effects->pool_has_classes[pool] ? pools[pool].reserved_bytes() : pool_peak[pool];
  }
  const std::int64_t overhead_bytes = schedule.persistent[static_cast<std::size_t>(MemoryCategory::overhead)];
  if (profile.device_memory_bytes > 0) {  // Note [Reserved memory]: the retry after a failed cudaMalloc
    walk.reserved_peak_bytes = std::min(walk.reserved_peak_bytes, std::max(profile.device_memory_bytes - overhead_bytes,
                                                                           walk.peak_bytes - overhead_bytes));
  }
  walk.device_peak_bytes = walk.reserved_peak_bytes + overhead_bytes;
  return walk;
}

}  // namespace shardplan
