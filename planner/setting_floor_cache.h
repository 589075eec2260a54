// SettingFloorCache: one micro-batch's setting floors (Note [Compute floor], Note [Activation floor]) computed once
// and shared by the searches of one model: every tensor-parallel degree's seed and FSDP search, the pipeline search,
// and every point of a capacity sweep (Note [Shared setting floors]).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "search.h"

namespace shardplan {

// Note [Shared setting floors]: a setting's floors come from one lowered micro-batch (setting_floors): its compute
// stream's forward, recompute and backward kernels and the activations they hold. Those depend on the model (the
// tensor-parallel view's layers), the GPU's kernel rates, the sequence and the knobs but the strategy — not on the
// world size, the global batch or the data-parallel ranks, which only set how many micro-batches a step has (the
// compute floor is one micro-batch's times that count, as setting_floors computes it). Before this cache every
// degree's seed (search_2d.cpp), its FSDP search (searcher.cpp), the pipeline search and each point of a capacity
// sweep lowered the same micro-batch again. One cache serves searches of one model (it is keyed by the view's layer
// and parameter counts, not by the whole ModelSpec); it is safe to share between threads.
class SettingFloorCache {
 public:
  // setting_floors(model, cluster, profile, training, knobs), from the cached micro-batch where one is known;
  // `context_parallel` as micro_batch_floors takes it.
  SettingFloors floors(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                       const TrainingConfig& training, const KnobSetting& knobs, int context_parallel = 1);
  // How many micro-batches it has lowered (a lookup that found one lowers none).
  std::size_t lowered() const;

 private:
  mutable std::mutex mutex_;
  std::size_t lowered_ = 0;
  std::map<std::string, std::shared_ptr<const SettingFloors>> per_micro_batch_;  // compute_s of one micro-batch
};

// setting_floors through `cache` where there is one.
SettingFloors cached_setting_floors(SettingFloorCache* cache, const ModelSpec& model, const Cluster& cluster,
                                    const HardwareProfile& profile, const TrainingConfig& training,
                                    const KnobSetting& knobs, int context_parallel = 1);

}  // namespace shardplan
