// Tests of the shared setting floors (Note [Shared setting floors] in planner/setting_floor_cache.h): the cache gives
// setting_floors' own figures, bit for bit, for any world size and global batch, lowers each micro-batch once, keeps
// tensor-parallel views and sequence lengths apart, and a capacity sweep's points share it.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "capacity.h"
#include "cluster.h"
#include "hardware_catalog.h"
#include "model_presets.h"
#include "search.h"
#include "setting_floor_cache.h"
#include "test_support.h"

using namespace shardplan;

namespace {

void check_equal(const SettingFloors& cached, const SettingFloors& direct) {
  CHECK(cached.compute_s == direct.compute_s);  // bit for bit: the same product in the same order
  CHECK(cached.activation_peak_bytes == direct.activation_peak_bytes);
  CHECK(cached.layer_compute_s == direct.layer_compute_s);
  CHECK(cached.layer_held_activation_bytes == direct.layer_held_activation_bytes);
  CHECK(cached.layer_forward_s == direct.layer_forward_s);
  CHECK(cached.layer_dispatch_s == direct.layer_dispatch_s);
  CHECK(cached.layer_stream_s == direct.layer_stream_s);
}

}  // namespace

TEST_CASE("setting floor cache: setting_floors' figures at every world size and global batch, each lowered once") {
  const ModelSpec model = preset_model("llama2-7b");
  SettingFloorCache cache;
  std::size_t lookups = 0;
  std::set<std::string> kernel_settings;
  for (const char* name : {"8xH100-80GB", "2x8xH100-80GB", "8x8xH100-80GB"}) {
    const Cluster cluster = parse_cluster(name, HardwareCatalog::builtin());
    const HardwareProfile profile = profile_from_cluster(cluster);
    for (const std::int64_t global_batch : {std::int64_t{0}, std::int64_t{512}}) {
      TrainingConfig training;
      training.seq_len = 4096;
      training.global_batch = global_batch;
      for (const KnobSetting& knobs : knob_settings(cluster, training, false)) {
        INFO(name << " global batch " << global_batch << " " << knobs.label());
        check_equal(cache.floors(model, cluster, profile, training, knobs),
                    setting_floors(model, cluster, profile, training, knobs));
        ++lookups;
        KnobSetting kernels = knobs;
        kernels.strategy = ShardingStrategy{};
        kernel_settings.insert(kernels.label());
      }
    }
  }
  // The strategies of one checkpointing pattern and micro-batch share a lowering, and so do the world sizes and
  // global batches: one lowering per kernel setting looked up.
  CHECK(cache.lowered() == kernel_settings.size());
  CHECK(cache.lowered() * 3 < lookups);
}

TEST_CASE("setting floor cache: another sequence length, GPU or tensor-parallel view is another lowering") {
  const ModelSpec model = preset_model("llama2-7b");
  const Cluster h100 = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  const Cluster a100 = parse_cluster("8xA100-80GB", HardwareCatalog::builtin());
  SettingFloorCache cache;
  TrainingConfig training;
  training.seq_len = 2048;
  const KnobSetting knobs = knob_settings(h100, training, false).front();
  const auto check_fresh = [&](const ModelSpec& view, const Cluster& cluster, const TrainingConfig& at) {
    const std::size_t before = cache.lowered();
    const HardwareProfile profile = profile_from_cluster(cluster);
    check_equal(cache.floors(view, cluster, profile, at, knobs), setting_floors(view, cluster, profile, at, knobs));
    CHECK(cache.lowered() == before + 1);
  };
  check_fresh(model, h100, training);
  TrainingConfig longer = training;
  longer.seq_len = 4096;
  check_fresh(model, h100, longer);
  check_fresh(model, a100, training);
  const TensorParallelSearchView tp2 = tensor_parallel_search_view(2, model, h100);
  check_fresh(tp2.model, tp2.cluster, training);
}

TEST_CASE("setting floor cache: a capacity sweep's points share it and answer as without it") {
  // Each point searched alone (its own cache, made by search_plans) against the sweep (one cache for all points).
  const ModelSpec model = preset_model("llama2-7b");
  TrainingConfig training;
  training.seq_len = 4096;
  CapacityOptions options;
  options.gpus = {"H100-80GB"};
  options.min_gpus = 16;
  options.max_gpus = 32;
  options.global_batch_tokens = 4194304;
  const CapacityResult sweep = capacity_sweep(model, HardwareCatalog::builtin(), training, options);
  REQUIRE(sweep.points.size() == 2);
  for (const CapacityPoint& point : sweep.points) {
    INFO(point.gpus << " GPUs");
    CapacityOptions alone = options;
    alone.min_gpus = alone.max_gpus = point.gpus;
    const CapacityResult single = capacity_sweep(model, HardwareCatalog::builtin(), training, alone);
    REQUIRE(single.points.size() == 1);
    CHECK(single.points[0].fits == point.fits);
    CHECK(single.points[0].step_time_s == point.step_time_s);
    CHECK(single.points[0].knobs == point.knobs);
  }
}
