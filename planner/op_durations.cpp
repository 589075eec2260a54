// base_durations_s: the schedule's op durations, one cost-model evaluation per distinct shape (Note [Durations by
// shape] in op_durations.h).
#include "op_durations.h"

#include <cstdint>
#include <utility>

#include "compute_cost.h"
#include "op_placement.h"

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
template <typename Key, typename Price>
double priced_once(std::vector<std::pair<Key, double>>& cache, const Key& key, const Price& price) {
  for (auto entry = cache.rbegin(); entry != cache.rend(); ++entry) {
    if (entry->first == key) return entry->second;
  }
  cache.emplace_back(key, price());
  return cache.back().second;
}

}  // namespace

std::vector<double> base_durations_s(const StepSchedule& schedule, const HardwareProfile& profile) {
  const int element_bytes = schedule.compute_element_bytes;
  // A layer pass by its kernels and zero-filled bytes (a unit's first backward of a micro-batch fills its gradient).
  using PassShape = std::pair<const PassKernels*, std::int64_t>;
  std::vector<std::pair<PassShape, double>> passes;
  std::vector<std::pair<CollectiveShape, double>> collectives;
  std::vector<double> base_s;
  base_s.reserve(schedule.ops.size());
  for (const Op& op : schedule.ops) {
    if (is_layer_pass(op.kind)) {
      base_s.push_back(priced_once(passes, PassShape{op.kernels.get(), op.zeroed_bytes}, [&] {
        return layer_pass_duration_s(op.kernels ? pass_time_s(*op.kernels, element_bytes, profile) : 0.0,
                                     op.zeroed_bytes, profile);
      }));
    } else if (is_collective(op.kind)) {
      const CollectiveShape shape{op.kind, op.bytes, op.group_size, op.group_spans_nodes, op.group_ranks_per_node};
      base_s.push_back(priced_once(collectives, shape, [&] { return base_duration_s(op, element_bytes, profile); }));
    } else {
      base_s.push_back(base_duration_s(op, element_bytes, profile));  // instants, copies, the optimizer step: cheap
    }
  }
  return base_s;
}

}  // namespace shardplan
