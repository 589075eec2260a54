// memory_effects: a schedule's memory changes flattened once (Note [Memory effects table] in memory_effects.h).
#include "memory_effects.h"

#include <algorithm>
#include <limits>
#include <span>

#include "errors.h"

namespace shardplan {

int allocator_pool(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::unsharded_params:
    case MemoryCategory::root_unit: return 1;
    case MemoryCategory::comm_buffers: return 2;
    case MemoryCategory::overhead: return -1;
    default: return 0;
  }
}

MemoryEffects memory_effects(const StepSchedule& schedule) {
  MemoryEffects effects;
  const std::size_t count = schedule.ops.size();
  effects.op_count = count;
  // Note [Allocator size classes] (caching_allocator.h): an op's activations are of its layer's largest tensor's
  // class; every other change is class 0.
  effects.size_classes.push_back(0);
  for (std::int64_t bytes : schedule.activation_tensor_bytes) effects.size_classes.push_back(bytes);
  std::sort(effects.size_classes.begin(), effects.size_classes.end());
  effects.size_classes.erase(std::unique(effects.size_classes.begin(), effects.size_classes.end()),
                             effects.size_classes.end());
  SHARDPLAN_CHECK(effects.size_classes.size() <= std::numeric_limits<std::uint16_t>::max(),
                  "a schedule's activation size classes fit 16 bits");
  std::vector<std::uint16_t> layer_class(schedule.activation_tensor_bytes.size());
  for (std::size_t layer = 0; layer < layer_class.size(); ++layer) {
    layer_class[layer] = static_cast<std::uint16_t>(
        std::lower_bound(effects.size_classes.begin(), effects.size_classes.end(),
                         schedule.activation_tensor_bytes[layer]) -
        effects.size_classes.begin());
  }

  effects.start_at.reserve(count + 1);
  effects.end_at.reserve(count);
  for (std::size_t index = 0; index < count; ++index) {
    const Op& op = schedule.ops[index];
    const auto add = [&](std::span<const MemoryChange> changes, std::int64_t sign) {
      for (const MemoryChange& change : changes) {
        MemoryDelta delta;
        delta.bytes = sign * change.bytes;
        delta.category = static_cast<std::uint8_t>(change.category);
        delta.pool = static_cast<std::int8_t>(allocator_pool(change.category));
        const bool classed = change.category == MemoryCategory::activations && op.layer >= 0 &&
                             static_cast<std::size_t>(op.layer) < layer_class.size();
        delta.size_class = classed ? layer_class[static_cast<std::size_t>(op.layer)] : 0;
        if (delta.pool >= 0 && delta.size_class > 0) {
          effects.pool_has_classes[static_cast<std::size_t>(delta.pool)] = true;
        }
        effects.deltas.push_back(delta);
      }
    };
    effects.start_at.push_back(static_cast<std::uint32_t>(effects.deltas.size()));
    add(op.frees_at_start, -1);  // Note [Reduction buffers] (schedule.h): released before the op allocates
    add(op.allocates, +1);
    effects.end_at.push_back(static_cast<std::uint32_t>(effects.deltas.size()));
    add(op.frees, -1);
    if (!op.frees_at_start.empty() || !op.allocates.empty() || !op.frees.empty()) {
      effects.stream_ops[static_cast<std::size_t>(op.stream)].push_back(static_cast<std::uint32_t>(index));
    }
  }
  effects.start_at.push_back(static_cast<std::uint32_t>(effects.deltas.size()));
  SHARDPLAN_CHECK(effects.deltas.size() <= std::numeric_limits<std::uint32_t>::max(),
                  "a schedule's memory changes fit 32-bit offsets");
  return effects;
}

}  // namespace shardplan
