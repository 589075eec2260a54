// SettingFloorCache (Note [Shared setting floors] in setting_floor_cache.h): one micro-batch's floors by the inputs
// they depend on.
#include "setting_floor_cache.h"

#include <utility>

namespace shardplan {

SettingFloors SettingFloorCache::floors(const ModelSpec& model, const Cluster& cluster,
                                        const HardwareProfile& profile, const TrainingConfig& training,
                                        const KnobSetting& knobs, int context_parallel) {
  // The kernels do not depend on the sharding strategy (Note [Compute floor]); the view's layer and parameter counts
  // tell the tensor-parallel degrees of one model apart.
  KnobSetting kernels_key = knobs;
  kernels_key.strategy = ShardingStrategy{};
  // Every training field but the global batch (sequence, precision, expert-parallel degree, loss, ...) as the plan
  // JSON writes them.
  TrainingConfig per_micro_batch = training;
  per_micro_batch.global_batch = 0;
  const std::string key = cluster.gpu.name + "|" + std::to_string(model.layers.size()) + "|" +
                          std::to_string(model.param_count()) + "|" + to_json(per_micro_batch, 1).dump() + "|" +
                          kernels_key.label() + "|cp" + std::to_string(context_parallel);
  std::shared_ptr<const SettingFloors> known;
  {
    const std::lock_guard lock(mutex_);
    if (const auto found = per_micro_batch_.find(key); found != per_micro_batch_.end()) known = found->second;
  }
  if (!known) {
    // Lowered outside the lock: two threads may lower the same micro-batch once each, to the same floors.
    MicroBatchFloors one = micro_batch_floors(model, cluster, profile, training, knobs, context_parallel);
    auto computed = std::make_shared<const SettingFloors>(std::move(one.floors));
    const std::lock_guard lock(mutex_);
    ++lowered_;
    known = per_micro_batch_.try_emplace(key, std::move(computed)).first->second;
  }
  SettingFloors floors = *known;
  // As setting_floors: one micro-batch's compute times this step's micro-batches.
  scale_to_micro_batches(floors, plan_for_knobs(model, cluster, training, knobs).grad_accumulation_steps);
  return floors;
}

std::size_t SettingFloorCache::lowered() const {
  const std::lock_guard lock(mutex_);
  return lowered_;
}

SettingFloors cached_setting_floors(SettingFloorCache* cache, const ModelSpec& model, const Cluster& cluster,
                                    const HardwareProfile& profile, const TrainingConfig& training,
                                    const KnobSetting& knobs, int context_parallel) {
  if (cache == nullptr) {
    MicroBatchFloors one = micro_batch_floors(model, cluster, profile, training, knobs, context_parallel);
    scale_to_micro_batches(one.floors, one.accumulation_steps);
    return std::move(one.floors);
  }
  return cache->floors(model, cluster, profile, training, knobs, context_parallel);
}

}  // namespace shardplan
