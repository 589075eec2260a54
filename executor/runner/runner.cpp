// Runner: set-up (lowering, checks, groups, sharded init), gathering the model back, expected collective counts.
#include "runner.h"

#include <source_location>

#include "errors.h"
#include "lowering.h"
#include "runner_support.h"
#include "unit_layout.h"

namespace shardplan::runner {

namespace {

// The model layers of each plan unit in the order lowering's UnitInfo lists them (the root's may be non-adjacent).
std::vector<std::vector<std::size_t>> unit_layers(const Plan& plan, const ModelSpec& model) {
  std::vector<std::vector<std::size_t>> layers;
  for (const UnitInfo& unit : plan_units(plan, model)) layers.push_back(unit.layers);
  return layers;
}

}  // namespace

Runner::Runner(const ModelSpec& model, const Plan& plan, comm::Communicator& world, RunnerOptions options)
    : model_(model), plan_(plan), options_(options), rank_(world.group().world_ranks.at(static_cast<std::size_t>(world.rank()))),
      world_size_(world.size()), tracker_(rank_, clock_) {
  const int gpus_per_node = options_.gpus_per_node > 0 ? options_.gpus_per_node : world_size_;
  std::vector<UnitLayout> layouts;
  try {
    layouts = unit_layouts(plan_, model_, world_size_, gpus_per_node);
    check_executable(plan_, layouts, rank_);
    schedule_ = lower_plan(plan_, model_, {world_size_, gpus_per_node, 0});
    layout_ = runtime::model_layout(model_);
    (void)runtime::decoder_dims(model_);  // InputError for a model the CPU kernels cannot run
    for (std::size_t index = 0; index < model_.layers.size(); ++index) {
      kernels_.push_back(runtime::make_layer_kernel(model_, index));
    }
  } catch (const InputError& error) {
    if (error.rank() >= 0) throw;
    throw InputError(error.what(), error.where(), rank_);
  }
  groups_ = std::make_unique<RunnerGroups>(world, layouts);
  runtime::InitOptions init;
  init.seed = options_.seed;
  const auto layers = unit_layers(plan_, model_);
  for (std::size_t unit = 0; unit < layouts.size(); ++unit) {
    const int group = layouts[unit].param_group;
    // Shard groups are consecutive ranks (make_shard_group), so the index inside the group is rank mod group.
    const int shard_index = group > 1 ? groups_->shard(group).rank() : 0;
    params_.push_back(std::make_unique<FlatParam>(layout_, runtime::unit_param_layout(layout_, layers[unit]),
                                                  layouts[unit], shard_index, init, tracker_));
  }
  for (auto& param : params_) param_groups_.emplace_back(*param, *groups_, world_size_);
}

Runner::~Runner() = default;

std::vector<float> Runner::gather_parameters() {
  std::vector<float> model_flat(static_cast<std::size_t>(layout_.element_count), 0.0f);
  for (auto& param : params_) {
    const UnitLayout& sizes = param->sizes();
    if (!sizes.gathers) {
      param->scatter_into_model(layout_, param->shard(), model_flat);
      continue;
    }
    std::vector<float> gathered(static_cast<std::size_t>(sizes.padded_elements));
    groups_->shard(sizes.param_group)
        .all_gather(param->shard().data(), static_cast<std::size_t>(sizes.shard_elements), gathered.data())
        .wait();
    param->scatter_into_model(layout_, gathered, model_flat);
  }
  return model_flat;
}

std::vector<FlatParam*> Runner::flat_params() {
  std::vector<FlatParam*> params;
  for (auto& param : params_) params.push_back(param.get());
  return params;
}

comm::CommCounters Runner::expected_collectives(const StepSchedule& schedule) {
  comm::CommCounters expected;
  for (const Op& op : schedule.ops) {
    comm::Collective kind;
    if (op.kind == OpKind::all_gather) {
      kind = comm::Collective::all_gather;
    } else if (op.kind == OpKind::reduce_scatter) {
      kind = comm::Collective::reduce_scatter;
    } else if (op.kind == OpKind::all_reduce) {
      kind = comm::Collective::all_reduce;
    } else {
      continue;
    }
    expected[kind].calls += 1;
    expected[kind].bytes += static_cast<std::uint64_t>(op.bytes);
  }
  return expected;
}

}  // namespace shardplan::runner
