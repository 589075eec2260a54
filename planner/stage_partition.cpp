// torchtitan_stage_blocks and balanced_stage_partition (Note [Stage partition] in stage_partition.h).
#include "stage_partition.h"

#include <algorithm>
#include <limits>
#include <string>

#include "errors.h"

namespace shardplan {

std::vector<int> torchtitan_stage_blocks(int stages, int blocks, int input_weight, int output_weight,
                                         const char* field) {
  const std::string where = std::string(field) + ": ";
  if (stages < 1 || blocks < 1) throw InputError(where + "expected at least one stage and one block");
  if (stages == 1) return {blocks};  // "Single stage gets everything"
  const int effective = blocks + input_weight + output_weight;
  if (stages > effective) {
    throw InputError(where + std::to_string(stages) + " stages exceed the " + std::to_string(effective) +
                     " effective layers (blocks + embedding and head weights)");
  }
  const int per_stage = effective / stages, extra = effective % stages;
  if (input_weight > per_stage || output_weight > per_stage) {
    throw InputError(where + "the embedding or head weight exceeds the " + std::to_string(per_stage) +
                     " layers per stage");
  }
  std::vector<int> split;
  int placed = 0;
  for (int stage = 0; stage < stages; ++stage) {
    int share = per_stage + (stage < extra ? 1 : 0);
    if (stage == 0) share -= input_weight;
    if (stage == stages - 1) share -= output_weight;
    share = std::min(std::max(share, 0), blocks - placed);  // torchtitan stops at the last block
    split.push_back(share);
    placed += share;
  }
  split.back() += blocks - placed;  // none left over with the asserts above; kept for safety of the sum
  return split;
}

std::vector<LayerRange> stage_layer_ranges(const ModelSpec& model, const std::vector<int>& blocks_per_stage,
                                           const char* field) {
  std::vector<std::size_t> blocks;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind == LayerKind::transformer_block) blocks.push_back(layer);
  }
  int total = 0;
  for (int count : blocks_per_stage) total += count;
  if (blocks_per_stage.empty() || total != static_cast<int>(blocks.size())) {
    throw InputError(std::string(field) + ": the stages hold " + std::to_string(total) + " blocks, expected the " +
                     std::to_string(blocks.size()) + " transformer blocks of " + model.name);
  }
  std::vector<LayerRange> ranges;
  std::size_t next_block = 0, begin = 0;
  for (std::size_t stage = 0; stage < blocks_per_stage.size(); ++stage) {
    next_block += static_cast<std::size_t>(blocks_per_stage[stage]);
    const bool last = stage + 1 == blocks_per_stage.size();
    const std::size_t end = last ? model.layers.size() : blocks[next_block - 1] + 1;
    if (blocks_per_stage[stage] < 0 || end <= begin) {
      throw InputError(std::string(field) + ": stage " + std::to_string(stage) + " would hold no layer");
    }
    ranges.push_back({begin, end});
    begin = end;
  }
  return ranges;
}

std::vector<int> stage_block_counts(const ModelSpec& model, const std::vector<LayerRange>& stages) {
  std::vector<int> counts;
  for (const LayerRange& stage : stages) {
    int blocks = 0;
    for (std::size_t layer = stage.begin; layer < stage.end && layer < model.layers.size(); ++layer) {
      blocks += model.layers[layer].kind == LayerKind::transformer_block ? 1 : 0;
    }
    counts.push_back(blocks);
  }
  return counts;
}

StagePartition balanced_stage_partition(const StagePartitionInput& input, int stages) {
  const int blocks = static_cast<int>(input.block_s.size());
  StagePartition result;
  if (stages < 1 || blocks < stages) return result;
  const bool limited = !input.stage_limit_bytes.empty();
  if (limited) {
    SHARDPLAN_CHECK(input.stage_limit_bytes.size() == static_cast<std::size_t>(stages) &&
                        input.in_flight_by_stage.size() == static_cast<std::size_t>(stages) &&
                        input.block_state_bytes.size() == input.block_s.size() &&
                        input.block_activation_bytes.size() == input.block_s.size(),
                    "a stage partition's memory inputs cover every stage and block");
  }
  // Prefix sums: the time and bytes of blocks [a, b).
  std::vector<double> time(static_cast<std::size_t>(blocks) + 1, 0.0);
  std::vector<std::int64_t> states(time.size(), 0), activations(time.size(), 0);
  for (int block = 0; block < blocks; ++block) {
    const auto at = static_cast<std::size_t>(block);
    time[at + 1] = time[at] + input.block_s[at];
    if (limited) {
      states[at + 1] = states[at] + input.block_state_bytes[at];
      activations[at + 1] = activations[at] + input.block_activation_bytes[at];
    }
  }
  const auto stage_time = [&](int stage, int first, int end) {
    return time[static_cast<std::size_t>(end)] - time[static_cast<std::size_t>(first)] +
           (stage == 0 ? input.first_extra_s : 0.0) + (stage == stages - 1 ? input.last_extra_s : 0.0);
  };
  const auto fits = [&](int stage, int first, int end) {
    if (!limited) return true;
    const auto s = static_cast<std::size_t>(stage);
    const std::int64_t bytes =
        states[static_cast<std::size_t>(end)] - states[static_cast<std::size_t>(first)] +
        static_cast<std::int64_t>(input.in_flight_by_stage[s]) *
            (activations[static_cast<std::size_t>(end)] - activations[static_cast<std::size_t>(first)]) +
        (stage == 0 ? input.first_extra_bytes : 0) + (stage == stages - 1 ? input.last_extra_bytes : 0);
    return bytes <= input.stage_limit_bytes[s];
  };
  constexpr double kNone = std::numeric_limits<double>::infinity();
  // best[s][b]: the least slowest-stage time of stages 0..s covering blocks [0, b); from[s][b]: stage s's first block.
  std::vector<std::vector<double>> best(static_cast<std::size_t>(stages),
                                        std::vector<double>(static_cast<std::size_t>(blocks) + 1, kNone));
  std::vector<std::vector<int>> from(best.size(), std::vector<int>(static_cast<std::size_t>(blocks) + 1, -1));
  for (int end = 1; end <= blocks - (stages - 1); ++end) {
    if (!fits(0, 0, end)) continue;
    best[0][static_cast<std::size_t>(end)] = stage_time(0, 0, end);
    from[0][static_cast<std::size_t>(end)] = 0;
  }
  for (int stage = 1; stage < stages; ++stage) {
    const auto s = static_cast<std::size_t>(stage);
    for (int end = stage + 1; end <= blocks - (stages - 1 - stage); ++end) {
      for (int first = stage; first < end; ++first) {
        const double before = best[s - 1][static_cast<std::size_t>(first)];
        if (before == kNone || !fits(stage, first, end)) continue;
        const double slowest = std::max(before, stage_time(stage, first, end));
        if (slowest < best[s][static_cast<std::size_t>(end)]) {
          best[s][static_cast<std::size_t>(end)] = slowest;
          from[s][static_cast<std::size_t>(end)] = first;
        }
      }
    }
  }
  const double answer = best.back()[static_cast<std::size_t>(blocks)];
  if (answer == kNone) return result;
  result.found = true;
  result.slowest_stage_s = answer;
  result.blocks.assign(static_cast<std::size_t>(stages), 0);
  for (int stage = stages - 1, end = blocks; stage >= 0; --stage) {
    const int first = from[static_cast<std::size_t>(stage)][static_cast<std::size_t>(end)];
    result.blocks[static_cast<std::size_t>(stage)] = end - first;
    end = first;
  }
  return result;
}

}  // namespace shardplan
