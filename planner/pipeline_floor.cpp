// Note [Pipeline floor] (search_pipeline.h): the bounds of a pipeline candidate's step and of its ranks' memory that
// the pipeline search prunes its grid by, from the per-layer floors of Note [Compute floor] and the schedule's order.
#include <algorithm>
#include <array>
#include <optional>

#include "communication_floor.h"
#include "errors.h"
#include "search_pipeline.h"
#include "unit_layout.h"

namespace shardplan {

StageFloors stage_floors(const SettingFloors& floors, const std::vector<LayerRange>& stages) {
  StageFloors result;
  for (const LayerRange& range : stages) {
    double compute_s = 0, forward_s = 0, dispatch_s = 0;
    std::array<double, kStreamCount> stream_s{};
    std::int64_t held_bytes = 0;
    for (std::size_t layer = range.begin; layer < range.end; ++layer) {
      compute_s += floors.layer_compute_s[layer];
      forward_s += floors.layer_forward_s[layer];
      dispatch_s += floors.layer_dispatch_s[layer];
      for (std::size_t stream = 0; stream < kStreamCount; ++stream) {
        stream_s[stream] += floors.layer_stream_s[layer][stream];
      }
      held_bytes += floors.layer_held_activation_bytes[layer];
    }
    result.compute_s.push_back(compute_s);
    result.forward_s.push_back(forward_s);
    result.dispatch_s.push_back(dispatch_s);
    result.stream_s.push_back(stream_s);
    result.held_bytes.push_back(std::max<std::int64_t>(0, held_bytes));
  }
  return result;
}

double pipeline_step_floor_s(const std::vector<double>& stage_compute_s, int pipeline_degree, int micro_batches,
                             bool split_backward) {
  SHARDPLAN_CHECK(pipeline_degree >= 1 && !stage_compute_s.empty() &&
                      stage_compute_s.size() % static_cast<std::size_t>(pipeline_degree) == 0,
                  "stages are pp x stages per rank");
  const auto ranks = static_cast<std::size_t>(pipeline_degree);
  std::vector<double> rank_compute_s(ranks, 0.0);
  for (std::size_t stage = 0; stage < stage_compute_s.size(); ++stage) {
    rank_compute_s[stage % ranks] += stage_compute_s[stage];
  }
  const double busiest_s = *std::max_element(rank_compute_s.begin(), rank_compute_s.end());
  double before_last_s = 0;  // Σ_{s < pp − 1} c_s: micro-batch 0's way in and the last one's way out
  for (std::size_t stage = 0; stage + 1 < ranks; ++stage) before_last_s += stage_compute_s[stage];
  const double m = static_cast<double>(micro_batches);
  if (split_backward) return m * busiest_s;
  return std::max(m * busiest_s, m * rank_compute_s[ranks - 1] + before_last_s);
}

double pipeline_replay_floor_s(const StageFloors& stages, const PipelineOrder& order) {
  SHARDPLAN_CHECK(stages.compute_s.size() == static_cast<std::size_t>(order.stage_count()) &&
                      stages.forward_s.size() == stages.compute_s.size(),
                  "a floor per stage of the order");
  if (order.kind == PipelineScheduleKind::interleaved_zero_bubble) return 0;
  StageDurations durations{stages.forward_s, {}, std::vector<double>(stages.compute_s.size(), 0.0)};
  for (std::size_t stage = 0; stage < stages.compute_s.size(); ++stage) {
    durations.backward_input_s.push_back(std::max(0.0, stages.compute_s[stage] - stages.forward_s[stage]));
  }
  return replay_pipeline_order(order, durations).makespan;
}

double pipeline_stretch_floor_s(const StageFloors& stages, int pipeline_degree, int micro_batches,
                                double least_slowdown) {
  SHARDPLAN_CHECK(pipeline_degree >= 1 && stages.compute_s.size() % static_cast<std::size_t>(pipeline_degree) == 0 &&
                      stages.dispatch_s.size() == stages.compute_s.size() &&
                      stages.stream_s.size() == stages.compute_s.size(),
                  "stage floors for pp x stages per rank");
  if (least_slowdown < 1.0) return 0;  // compute_s holds the kernels times the slowdown: no K to part from it
  const auto ranks = static_cast<std::size_t>(pipeline_degree);
  const double m = static_cast<double>(micro_batches);
  double floor_s = 0;
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    double kernels_s = 0, dispatch_s = 0;
    std::array<double, kStreamCount> stream_s{};
    for (std::size_t stage = rank; stage < stages.compute_s.size(); stage += ranks) {
      kernels_s += stages.compute_s[stage] - stages.dispatch_s[stage];
      dispatch_s += stages.dispatch_s[stage];
      for (std::size_t stream = 0; stream < kStreamCount; ++stream) stream_s[stream] += stages.stream_s[stage][stream];
    }
    const double busiest_stream_s = *std::max_element(stream_s.begin(), stream_s.end());
    floor_s = std::max(floor_s, step_floor_s(m * kernels_s, m * dispatch_s, m * busiest_stream_s, least_slowdown));
  }
  return floor_s;
}

std::vector<std::int64_t> pipeline_live_floor_bytes(const std::vector<std::int64_t>& stage_held_bytes,
                                                    const PipelineStatesFloor* states, int pipeline_degree,
                                                    PipelineScheduleKind schedule, int micro_batches,
                                                    const PipelineBufferBytes* buffers) {
  SHARDPLAN_CHECK(pipeline_degree >= 1 && !stage_held_bytes.empty() &&
                      stage_held_bytes.size() % static_cast<std::size_t>(pipeline_degree) == 0,
                  "stages are pp x stages per rank");
  const int stages_per_rank = static_cast<int>(stage_held_bytes.size()) / pipeline_degree;
  return pipeline_live_floor_bytes(stage_held_bytes, states,
                                   pipeline_order(schedule, pipeline_degree, stages_per_rank, micro_batches), buffers);
}

std::vector<std::int64_t> pipeline_live_floor_bytes(const std::vector<std::int64_t>& stage_held_bytes,
                                                    const PipelineStatesFloor* states, const PipelineOrder& order,
                                                    const PipelineBufferBytes* buffers, PipelineFloorPeaks* peaks) {
  const int pipeline_degree = order.ranks, micro_batches = order.micro_batches;
  SHARDPLAN_CHECK(stage_held_bytes.size() == static_cast<std::size_t>(order.stage_count()),
                  "stages are pp x stages per rank");
  const std::size_t stages = stage_held_bytes.size();
  SHARDPLAN_CHECK(states == nullptr || (states->stage_gathered_bytes.size() == stages &&
                                        states->stage_gradient_bytes.size() == stages &&
                                        states->rank_states_bytes.size() == static_cast<std::size_t>(pipeline_degree)),
                  "states floor per stage and rank");
  // Note [Pipeline buffers], as the lowering allocates them: every micro-batch's receive buffers, made once and kept
  // (a non-first stage's for its input, a non-last stage's for its output's gradient); the input lives in its buffer,
  // so a non-first stage's first layer keeps up to one boundary tensor less of its own (the lowering takes the
  // buffer's bytes off that layer's kept activations: taking the whole tensor off keeps this a floor); a non-last
  // stage's output stays in its forward cache until the micro-batch's backward (a split backward's input part lets it
  // go); the last stage keeps every micro-batch's output until the step ends.
  const std::int64_t boundary_bytes = buffers ? buffers->boundary_bytes : 0;
  std::vector<std::int64_t> held_bytes = stage_held_bytes, cached_bytes(stages, 0), receive_bytes(stages, 0);
  for (std::size_t stage = 0; stage < stages; ++stage) {
    const bool first = stage == 0, last = stage + 1 == stages;
    if (!first) held_bytes[stage] -= boundary_bytes;
    if (!last) cached_bytes[stage] = boundary_bytes;
    receive_bytes[stage] = static_cast<std::int64_t>((first ? 0 : 1) + (last ? 0 : 1)) * micro_batches * boundary_bytes;
  }
  const std::int64_t kept_output_bytes = buffers ? buffers->output_bytes : 0;
  // Each rank's actions in its order: a forward adds its stage's activations once it ends (and, the first time, the
  // stage's gathered parameters, kept to its last backward); a backward (full, or a split one's weight part: Note
  // [Split backward lowering]) releases them and, the first time, adds the stage's full-size gradient, reduced and
  // freed with the parameters at the last micro-batch's. The most live between two actions is a floor.
  std::vector<std::int64_t> fullest_bytes;
  if (peaks != nullptr) peaks->held_micro_batches.assign(order.by_rank.size(), std::vector<int>(stages, 0));
  for (std::size_t rank = 0; rank < order.by_rank.size(); ++rank) {
    std::vector<int> forwards(stages, 0), backwards(stages, 0);
    std::int64_t live_bytes = 0, most_bytes = 0, persistent_bytes = 0;
    const auto reached = [&] {  // a new most: where the rank's stages hold how many micro-batches
      if (live_bytes <= most_bytes) return;
      most_bytes = live_bytes;
      if (peaks == nullptr) return;
      for (std::size_t stage = rank; stage < stages; stage += static_cast<std::size_t>(pipeline_degree)) {
        peaks->held_micro_batches[rank][stage] = forwards[stage] - backwards[stage];
      }
    };
    for (std::size_t stage = rank; stage < stages; stage += static_cast<std::size_t>(pipeline_degree)) {
      persistent_bytes += receive_bytes[stage];
    }
    for (const PipelineAction& action : order.by_rank[rank]) {
      const auto stage = static_cast<std::size_t>(action.stage);
      const std::int64_t gathered_bytes = states ? states->stage_gathered_bytes[stage] : 0;
      const std::int64_t gradient_bytes = states ? states->stage_gradient_bytes[stage] : 0;
      if (action.kind == PipelineActionKind::forward) {
        if (forwards[stage]++ == 0) live_bytes += gathered_bytes;
        live_bytes += held_bytes[stage] + cached_bytes[stage];
        if (stage + 1 == stages) live_bytes += kept_output_bytes;  // until the step returns it
        reached();
        continue;
      }
      if (action.kind != PipelineActionKind::backward_weight) live_bytes -= cached_bytes[stage];
      if (action.kind != PipelineActionKind::backward_input) {
        live_bytes -= held_bytes[stage];
        if (backwards[stage]++ == 0) live_bytes += gradient_bytes;
        reached();
        if (backwards[stage] == micro_batches) live_bytes -= gradient_bytes + gathered_bytes;
      }
    }
    fullest_bytes.push_back(most_bytes + persistent_bytes + (states ? states->rank_states_bytes[rank] : 0));
  }
  return fullest_bytes;
}

PipelineStatesFloor pipeline_states_floor(const ModelSpec& view_model, const TrainingConfig& training,
                                          const ShardingStrategy& strategy, const PipelinePolicy& policy,
                                          int data_parallel_ranks, int gpus_per_node) {
  const auto ranks = static_cast<std::size_t>(policy.degree);
  PipelineStatesFloor floor;
  floor.rank_states_bytes.assign(ranks, 0);
  const auto layout_of = [&](const std::vector<std::size_t>& layers) -> std::optional<UnitLayout> {
    try {
      return states_floor_layout(strategy, view_model, layers, training, data_parallel_ranks, gpus_per_node);
    } catch (const InputError&) {
      return std::nullopt;  // no floor where the layout refuses (the simulation judges the plan)
    }
  };
  for (std::size_t stage = 0; stage < policy.stages.size(); ++stage) {
    std::vector<std::size_t> layers;
    for (std::size_t layer = policy.stages[stage].begin; layer < policy.stages[stage].end; ++layer) {
      layers.push_back(layer);
    }
    const std::optional<UnitLayout> layout = layout_of(layers);
    floor.stage_gathered_bytes.push_back(layout && layout->gathers ? layout->gathered_bytes : 0);
    floor.stage_gradient_bytes.push_back(layout && layout->grad_copies ? layout->grad_copy_bytes : 0);
  }
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    std::vector<std::size_t> held;
    for (std::size_t stage = rank; stage < policy.stages.size(); stage += ranks) {
      for (std::size_t layer = policy.stages[stage].begin; layer < policy.stages[stage].end; ++layer) {
        held.push_back(layer);
      }
    }
    if (const std::optional<UnitLayout> layout = layout_of(held)) {
      Plan states_only;
      states_only.training = training;
      for (const std::int64_t bytes : persistent_memory({*layout}, states_only, 0)) {
        floor.rank_states_bytes[rank] += bytes;
      }
    }
  }
  return floor;
}

}  // namespace shardplan
