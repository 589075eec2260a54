// Tests of the pipeline stage partitions (Note [Stage partition]): torchtitan's default split on its own examples,
// the balanced split against brute force, the head's extra time, and memory limits.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "errors.h"
#include "stage_partition.h"

using namespace shardplan;

TEST_CASE("stage partition: torchtitan's default split, embedding and head counted as one layer each") {
  // generate_llm_fqn_per_model_part: 32 layers on 8 stages -> 34 effective, 4 + 2 extra: stage 0 gets 5 - 1,
  // stage 1 gets 5, stages 2..6 get 4, stage 7 gets 4 - 1.
  CHECK(torchtitan_stage_blocks(8, 32, 1, 1, "--pipeline") == std::vector<int>{4, 5, 4, 4, 4, 4, 4, 3});
  // 27 layers on 4 stages -> 29 effective, 7 each + 1 extra: 7, 7, 7, 6.
  CHECK(torchtitan_stage_blocks(4, 27, 1, 1, "--pipeline") == std::vector<int>{7, 7, 7, 6});
  // Llama 3.1 405B (126 layers) on 8 pipeline ranks: 128 effective, 16 each.
  CHECK(torchtitan_stage_blocks(8, 126, 1, 1, "--pipeline") == std::vector<int>{15, 16, 16, 16, 16, 16, 16, 15});
  CHECK(torchtitan_stage_blocks(1, 32, 1, 1, "--pipeline") == std::vector<int>{32});
  CHECK_THROWS_WITH_AS(torchtitan_stage_blocks(40, 32, 1, 1, "--pipeline"),
                       doctest::Contains("--pipeline: 40 stages exceed the 34 effective layers"), InputError);
}

TEST_CASE("stage partition: the balanced split is the brute-force min-max split") {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> duration(0.5, 2.0);
  for (int trial = 0; trial < 40; ++trial) {
    const int blocks = 3 + trial % 7, stages = 1 + trial % std::min(blocks, 4);
    StagePartitionInput input;
    for (int block = 0; block < blocks; ++block) input.block_s.push_back(duration(random));
    input.first_extra_s = duration(random) * (trial % 2);
    input.last_extra_s = duration(random);
    const StagePartition split = balanced_stage_partition(input, stages);
    REQUIRE(split.found);
    CHECK(std::all_of(split.blocks.begin(), split.blocks.end(), [](int count) { return count >= 1; }));
    // Brute force over every placement of the stages - 1 cuts.
    double best = 1e300;
    std::vector<int> cuts;
    const std::function<void(int, int)> place = [&](int stage, int first) {
      if (stage == stages - 1) {
        double slowest = 0, sum = 0;
        int start = 0;
        std::vector<int> ends = cuts;
        ends.push_back(blocks);
        for (int s = 0; s < stages; ++s) {
          sum = 0;
          for (int b = start; b < ends[static_cast<std::size_t>(s)]; ++b) {
            sum += input.block_s[static_cast<std::size_t>(b)];
          }
          if (s == 0) sum += input.first_extra_s;
          if (s == stages - 1) sum += input.last_extra_s;
          slowest = std::max(slowest, sum);
          start = ends[static_cast<std::size_t>(s)];
        }
        best = std::min(best, slowest);
        return;
      }
      for (int cut = first + 1; cut <= blocks - (stages - 1 - stage); ++cut) {
        cuts.push_back(cut);
        place(stage + 1, cut);
        cuts.pop_back();
      }
    };
    place(0, 0);
    CHECK(split.slowest_stage_s == doctest::Approx(best));
  }
}

TEST_CASE("stage partition: the head's time moves blocks off the last stage; a memory limit moves them back") {
  StagePartitionInput input;
  input.block_s.assign(16, 1.0);
  input.last_extra_s = 2.0;  // the output projection and loss: two blocks' worth
  const StagePartition timed = balanced_stage_partition(input, 4);
  REQUIRE(timed.found);
  CHECK(timed.blocks.back() < 4);
  CHECK(timed.slowest_stage_s == doctest::Approx(5.0));  // 18 units over 4 stages: at best 5 (4.5 is not reachable)
  // Memory: stage 0 of 1F1B holds pp = 4 micro-batches of activations, the last stage one.
  input.block_state_bytes.assign(16, 10);
  input.block_activation_bytes.assign(16, 10);
  input.in_flight_by_stage = {4, 3, 2, 1};
  input.stage_limit_bytes = {160, 160, 160, 160};  // stage 0: 50 bytes per block -> at most 3 blocks
  const StagePartition limited = balanced_stage_partition(input, 4);
  REQUIRE(limited.found);
  CHECK(limited.blocks.front() <= 3);
  input.stage_limit_bytes = {40, 40, 40, 40};  // no split fits 16 blocks
  CHECK_FALSE(balanced_stage_partition(input, 4).found);
  CHECK_FALSE(balanced_stage_partition(input, 20).found);  // more stages than blocks
}
