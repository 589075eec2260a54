// balanced_stage_blocks (Note [Balanced stage split] in stage_balance.h).
#include "stage_balance.h"

#include <algorithm>
#include <cstddef>
#include <limits>

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
  // The floor of `split`; the step floor alone where that is already no lower than `bound` (the replay only raises
  // it, and it is the costly part: every action of every micro-batch).
  const auto floor_of = [&](const std::vector<int>& split, double bound) {
    std::size_t first = 0;
    for (std::size_t stage = 0; stage < stages; ++stage) {
      const std::size_t end = first + static_cast<std::size_t>(split[stage]);
      floors.compute_s[stage] = compute_before[end] - compute_before[first];
      floors.forward_s[stage] = forward_before[end] - forward_before[first];
      first = end;
    }
    const double step_s =
        pipeline_step_floor_s(floors.compute_s, input.pipeline_degree, input.micro_batches, input.split_backward);
    if (input.split_backward || input.order == nullptr || step_s >= bound) return step_s;
    return std::max(step_s, pipeline_replay_floor_s(floors, *input.order));
  };
  constexpr double kNoBound = std::numeric_limits<double>::infinity();
  // Memory mode's order: the overflow, then the time; time alone: the overflow is always 0.
  const bool memory = static_cast<bool>(input.overflow_bytes);
  struct Cost {
    std::int64_t overflow_bytes = 0;
    double floor_s = 0;
  };
  // A split's cost, its floor exact where it may be lower than `than`'s; while a split overflows, the step floor alone
  // orders the splits of equal overflow (the replay is for the splits that fit).
  const auto cost_of = [&](const std::vector<int>& split, const Cost& than) {
    const std::int64_t overflow = memory ? input.overflow_bytes(split) : 0;
    if (overflow > than.overflow_bytes) return Cost{overflow, kNoBound};
    if (overflow > 0) return Cost{overflow, floor_of(split, 0.0)};
    return Cost{overflow, floor_of(split, overflow < than.overflow_bytes ? kNoBound : than.floor_s * (1 - kLowerBy))};
  };
  const auto lower = [](const Cost& a, const Cost& b) {
    if (a.overflow_bytes != b.overflow_bytes) return a.overflow_bytes < b.overflow_bytes;
    return a.floor_s < b.floor_s * (1 - kLowerBy);
  };
  const Cost start = cost_of(input.start_blocks, Cost{std::numeric_limits<std::int64_t>::max(), kNoBound});
  std::vector<int> split = input.start_blocks;
  Cost split_cost = start;
  if (stages == static_cast<std::size_t>(input.pipeline_degree)) {
    StagePartitionInput linear_input;
    linear_input.block_s = block_s;
    const StagePartition linear = balanced_stage_partition(linear_input, static_cast<int>(stages));
    if (linear.found) {
      const Cost linear_cost = cost_of(linear.blocks, split_cost);
      if (lower(linear_cost, split_cost)) {
        split = linear.blocks;
        split_cost = linear_cost;
      }
    }
  }
  for (;;) {
    std::vector<int> best_move;
    Cost best = split_cost;
    for (std::size_t boundary = 0; boundary + 1 < stages; ++boundary) {
      for (const int towards_first : {1, -1}) {
        std::vector<int> moved = split;
        moved[boundary] += towards_first;
        moved[boundary + 1] -= towards_first;
        if (moved[boundary] < 1 || moved[boundary + 1] < 1) continue;
        const Cost moved_cost = cost_of(moved, best);
        if (lower(moved_cost, best)) {
          best = moved_cost;
          best_move = std::move(moved);
        }
      }
    }
    if (best_move.empty()) break;
    split = std::move(best_move);
    split_cost = best;
  }
  if (split_cost.overflow_bytes > 0 || !lower(split_cost, start)) return {};
  return split;
}

}  // namespace shardplan
