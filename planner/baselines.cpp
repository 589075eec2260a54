// The plan search's baselines: FSDP's transformer_auto_wrap_policy and size_based_auto_wrap_policy(1e8), and DDP, on
// the same model and cluster, simulated like every candidate.
#include "errors.h"
#include "memory_headroom.h"
#include "search.h"
#include "step_analysis.h"

namespace shardplan {

std::vector<BaselineResult> baseline_plans(const ModelSpec& model, const Cluster& cluster,
                                           const HardwareProfile& profile, const TrainingConfig& training,
                                           std::int64_t memory_cap_bytes) {
  std::vector<BaselineResult> baselines;
  const auto run = [&](const std::string& name, const ShardingStrategy& strategy, const Wrapping& wrapping) {
    BaselineResult baseline;
    baseline.name = name;
    baseline.candidate.plan = default_plan(model, training, strategy, wrapping, cluster.world_size());
    baseline.candidate.plan.name = name;
    // Note [Uniform requires_grad] (plan.h): a policy that puts frozen and trainable blocks in one FlatParameter is
    // one FSDP1 would refuse too; it is no baseline.
    try {
      check_uniform_requires_grad(baseline.candidate.plan, model);
    } catch (const InputError&) {
      return;
    }
    baseline.candidate.knobs = name;
    baseline.candidate.summary =
        analyze_step(model, cluster, profile, baseline.candidate.plan, false).simulation.summary;
    baseline.candidate.fits = fits_in_memory(baseline.candidate.summary, memory_cap_bytes);
    baselines.push_back(std::move(baseline));
  };
  // transformer_auto_wrap_policy: one unit per decoder layer, FULL_SHARD, BACKWARD_PRE prefetch.
  run("transformer_auto_wrap_policy", {}, wrap_per_block(model));
  // size_based_auto_wrap_policy(min_num_params=1e8): consecutive blocks grouped until a unit reaches 1e8 parameters
  // (our granularity is the layer; FSDP may also wrap sub-modules of a large layer).
  Wrapping size_based;
  std::size_t begin = 0;
  std::int64_t accumulated = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind != LayerKind::transformer_block) continue;
    if (accumulated == 0) begin = layer;
    accumulated += model.layers[layer].param_count();
    const bool last_block = layer + 1 >= model.layers.size() ||
                            model.layers[layer + 1].kind != LayerKind::transformer_block;
    if (accumulated >= 100'000'000 || last_block) {
      size_based.units.push_back({begin, layer + 1});
      accumulated = 0;
    }
  }
  run("size_based_auto_wrap_policy(1e8)", {}, size_based);
  // Note [Expert parallelism] (unit_layout.h): DDP replicates every parameter, which EP's experts are not; an
  // expert-parallel search has no DDP baseline.
  if (training.expert_parallel_degree == 1) {
    ShardingStrategy ddp;
    ddp.kind = StrategyKind::no_shard;
    run("no_shard (DDP)", ddp, wrap_per_block(model));
  }
  return baselines;
}

}  // namespace shardplan
