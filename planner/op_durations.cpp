// op_durations: the schedule's op durations and overlap slowdowns, one cost-model evaluation per distinct shape (Note
// [Durations by shape] in op_durations.h).
#include "op_durations.h"

#include <cstdint>
#include <utility>

#include "compute_cost.h"
#include "op_placement.h"
#include "overlap_slowdown.h"

namespace shardplan {
namespace {

// What a collective's duration reads of its op (base_duration_s: collective_cost of kind, bytes and placement).
struct CollectiveShape {
  OpKind kind;
  std::int64_t bytes;
  int group_size;
  bool group_spans_nodes;
  int group_ranks_per_node;
  bool operator==(const CollectiveShape&) const = default;
};

// A few shapes per schedule, found again mostly at the latest entry: a linear search from the back beats hashing.
template <typename Key, typename Value, typename Price>
Value priced_once(std::vector<std::pair<Key, Value>>& cache, const Key& key, const Price& price) {
  for (auto entry = cache.rbegin(); entry != cache.rend(); ++entry) {
    if (entry->first == key) return entry->second;
  }
  cache.emplace_back(key, price());
  return cache.back().second;
}

}  // namespace

OpDurations op_durations(const StepSchedule& schedule, const HardwareProfile& profile) {
  const int element_bytes = schedule.compute_element_bytes;
  // A layer pass by its kernels and zero-filled bytes (a unit's first backward of a micro-batch fills its gradient):
  // its duration and overlap slowdown, from one pass_time.
  using PassShape = std::pair<const PassKernels*, std::int64_t>;
  struct PassPrice {
    double base_s;
    double slowdown;
  };
  std::vector<std::pair<PassShape, PassPrice>> passes;
  std::vector<std::pair<CollectiveShape, double>> collectives;
  OpDurations durations;
  durations.base_s.reserve(schedule.ops.size());
  durations.overlap_slowdown.reserve(schedule.ops.size());
  for (const Op& op : schedule.ops) {
    if (is_layer_pass(op.kind)) {
      const PassPrice price = priced_once(passes, PassShape{op.kernels.get(), op.zeroed_bytes}, [&] {
        const PassTime time = op.kernels ? pass_time(*op.kernels, element_bytes, profile) : PassTime{};
        return PassPrice{layer_pass_duration_s(time.total_s, op.zeroed_bytes, profile),
                         pass_overlap_slowdown(time, buffer_fill_time_s(op.zeroed_bytes, profile), profile)};
      });
      durations.base_s.push_back(price.base_s);
      durations.overlap_slowdown.push_back(price.slowdown);
      continue;
    }
    if (is_collective(op.kind)) {
      const CollectiveShape shape{op.kind, op.bytes, op.group_size, op.group_spans_nodes, op.group_ranks_per_node};
      durations.base_s.push_back(
          priced_once(collectives, shape, [&] { return base_duration_s(op, element_bytes, profile); }));
    } else {
      durations.base_s.push_back(base_duration_s(op, element_bytes, profile));  // instants, copies, the optimizer step
    }
    durations.overlap_slowdown.push_back(overlap_slowdown(op, element_bytes, profile));  // 1, or memory-bound
  }
  return durations;
}

std::vector<double> base_durations_s(const StepSchedule& schedule, const HardwareProfile& profile) {
  return op_durations(schedule, profile).base_s;
}

}  // namespace shardplan
