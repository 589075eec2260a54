// balanced_stage_blocks (Note [Balanced stage split] in stage_balance.h).
#include "stage_balance.h"

#include <algorithm>
#include <cstddef>

#include "errors.h"
#include "search_pipeline.h"
#include "stage_partition.h"

namespace shardplan {

namespace {

// A relative step below which a floor is not lower: the descent stops on plateaus and rounding.
constexpr double kLowerBy = 1e-9;

// Per block, a layer quantity with the non-block layers before it (the last block also takes those after it).
std::vector<double> per_block(const ModelSpec& model, const std::vector<double>& per_layer) {
  SHARDPLAN_CHECK(per_layer.size() == model.layers.size(), "a floor per model layer");
  std::vector<double> blocks;
  double pending = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    pending += per_layer[layer];
    if (model.layers[layer].kind == LayerKind::transformer_block) {
      blocks.push_back(pending);
      pending = 0;
    }
  }
  if (!blocks.empty()) blocks.back() += pending;
  return blocks;
}

std::vector<double> prefix_sums(const std::vector<double>& values) {
  std::vector<double> sums(values.size() + 1, 0.0);
  for (std::size_t at = 0; at < values.size(); ++at) sums[at + 1] = sums[at] + values[at];
  return sums;
}

}  // namespace

std::vector<int> balanced_stage_blocks(const ModelSpec& model, const StageBalanceInput& input) {
  const std::vector<double> block_s = per_block(model, input.layer_compute_s);
  const std::size_t stages = input.start_blocks.size();
  if (block_s.size() < stages || stages < 2) return {};
  const std::vector<double> compute_before = prefix_sums(block_s);
  const std::vector<double> forward_before = prefix_sums(per_block(model, input.layer_forward_s));
  StageFloors floors;
  floors.compute_s.assign(stages, 0.0);
  floors.forward_s.assign(stages, 0.0);
  const auto floor_of = [&](const std::vector<int>& split) {
    std::size_t first = 0;
    for (std::size_t stage = 0; stage < stages; ++stage) {
      const std::size_t end = first + static_cast<std::size_t>(split[stage]);
      floors.compute_s[stage] = compute_before[end] - compute_before[first];
      floors.forward_s[stage] = forward_before[end] - forward_before[first];
      first = end;
    }
    const double step_s =
        pipeline_step_floor_s(floors.compute_s, input.pipeline_degree, input.micro_batches, input.split_backward);
    if (input.split_backward || input.order == nullptr) return step_s;
    return std::max(step_s, pipeline_replay_floor_s(floors, *input.order));
  };
  const double start_s = floor_of(input.start_blocks);
  std::vector<int> split = input.start_blocks;
  double split_s = start_s;
  if (stages == static_cast<std::size_t>(input.pipeline_degree)) {
    StagePartitionInput linear_input;
    linear_input.block_s = block_s;
    const StagePartition linear = balanced_stage_partition(linear_input, static_cast<int>(stages));
    if (linear.found) {
      const double linear_s = floor_of(linear.blocks);
      if (linear_s < split_s) {
        split = linear.blocks;
        split_s = linear_s;
      }
    }
  }
  for (;;) {
    std::vector<int> best_move;
    double best_s = split_s * (1 - kLowerBy);
    for (std::size_t boundary = 0; boundary + 1 < stages; ++boundary) {
      for (const int towards_first : {1, -1}) {
        std::vector<int> moved = split;
        moved[boundary] += towards_first;
        moved[boundary + 1] -= towards_first;
        if (moved[boundary] < 1 || moved[boundary + 1] < 1) continue;
        const double moved_s = floor_of(moved);
        if (moved_s < best_s) {
          best_s = moved_s;
          best_move = std::move(moved);
        }
      }
    }
    if (best_move.empty()) break;
    split = std::move(best_move);
    split_s = best_s;
  }
  if (split_s >= start_s * (1 - kLowerBy)) return {};
  return split;
}

}  // namespace shardplan
