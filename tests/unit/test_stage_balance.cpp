// Tests of the pipeline search's balanced stage split (Note [Balanced stage split] in stage_balance.h): a heavy head
// by hand, no second split where torchtitan's is as good, and the search's answer beating torchtitan's split of the
// same point in simulation.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "search_fixtures.h"
#include "search_pipeline.h"
#include "stage_balance.h"
#include "stage_partition.h"
#include "step_analysis.h"

using namespace shardplan;

namespace {

// An embedding, `blocks` transformer blocks, a final norm and a head: only the layer kinds matter to the split.
ModelSpec kinds_only(int blocks) {
  ModelSpec model;
  model.name = "kinds";
  const auto layer = [](LayerKind kind) {
    LayerSpec spec;
    spec.kind = kind;
    return spec;
  };
  model.layers.push_back(layer(LayerKind::embedding));
  for (int block = 0; block < blocks; ++block) model.layers.push_back(layer(LayerKind::transformer_block));
  model.layers.push_back(layer(LayerKind::norm));
  model.layers.push_back(layer(LayerKind::lm_head));
  return model;
}

}  // namespace

TEST_CASE("balanced stage split: a head of two blocks' time moves a block to the first stage") {
  // 6 blocks of 1 s and a 2 s head on 2 stages (pp 2, one stage per rank), 4 micro-batches, the step floor alone (no
  // order): torchtitan's [3, 3] gives stages of 3 s and 5 s, floor max(4 x 5, 4 x 5 + 3) = 23 s; [4, 2] gives 4 s and
  // 4 s, max(16, 16 + 4) = 20 s, and [5, 1] (5 s, 3 s) no lower: max(20, 12 + 5) = 20 s.
  const ModelSpec model = kinds_only(6);
  const std::vector<double> layer_s{0, 1, 1, 1, 1, 1, 1, 0, 2};
  const std::vector<double> forward_s(layer_s.size(), 0.0);
  REQUIRE(torchtitan_stage_blocks(2, 6, 1, 1, "test") == std::vector<int>{3, 3});
  StageBalanceInput input{layer_s, forward_s, {3, 3}, 2, 4, nullptr, false};
  CHECK(balanced_stage_blocks(model, input) == std::vector<int>{4, 2});
  // Under a split backward the floor is the busiest rank's alone: 4 x 5 = 20 s against 4 x 4 = 16 s.
  input.split_backward = true;
  CHECK(balanced_stage_blocks(model, input) == std::vector<int>{4, 2});
  // With the schedule's order replayed the answer still splits 6 blocks, every stage non-empty, and lowers the floor.
  const PipelineOrder order = pipeline_order(PipelineScheduleKind::one_f_one_b, 2, 1, 4);
  input.split_backward = false;
  input.order = &order;
  const std::vector<int> replayed = balanced_stage_blocks(model, input);
  REQUIRE(replayed.size() == 2);
  CHECK(std::accumulate(replayed.begin(), replayed.end(), 0) == 6);
  CHECK(replayed != std::vector<int>{3, 3});
}

TEST_CASE("balanced stage split: none where torchtitan's split is as fast by the floor") {
  // 8 blocks of 1 s, nothing else: torchtitan's [4, 4] floors at max(4 x 4, 4 x 4 + 4) = 20 s, and [5, 3] at
  // max(20, 12 + 5) = 20 s: no split is lower, so no second point.
  const ModelSpec model = kinds_only(8);
  const std::vector<double> layer_s{0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  const std::vector<double> forward_s(layer_s.size(), 0.0);
  CHECK(balanced_stage_blocks(model, {layer_s, forward_s, {4, 4}, 2, 4, nullptr, false}).empty());
  // Fewer blocks than stages: nothing to move.
  CHECK(balanced_stage_blocks(kinds_only(1), {{0, 1, 0, 0}, {0, 0, 0, 0}, {1, 0}, 2, 4, nullptr, false}).empty());
}

TEST_CASE("balanced stage split: the search's answer beats torchtitan's split of its own point") {
  // llama3-8b on 4 x 8 H100s, pp 2 Interleaved1F1B x 2: torchtitan's split [8, 9, 8, 7] leaves rank 1 (stages 1 and 3)
  // 16 blocks and the head; the search's split is simulated faster than the same plan with torchtitan's stages.
  const testing::SearchCase setup("llama3-8b", "4x8xH100-80GB", 8192);
  PipelineSearchOptions options;
  options.pipeline_degrees = {2};
  options.tensor_parallel_degrees = {1, 2, 4};
  options.schedule = PipelineScheduleKind::interleaved_1f1b;
  options.stages_per_rank = 2;
  options.usable_bytes = setup.cluster.gpu.memory_bytes;
  const PipelineSearchResult result =
      search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training, options);
  REQUIRE(result.feasible);
  const Plan& planned = result.best.plan;
  const PipelinePolicy torchtitan =
      default_pipeline(setup.model, 2, PipelineScheduleKind::interleaved_1f1b, 2);
  CHECK(planned.pipeline.stages != torchtitan.stages);
  CHECK(result.best.knobs.find("balanced split") != std::string::npos);
  Plan torchtitan_split = planned;
  torchtitan_split.pipeline.stages = torchtitan.stages;
  const double torchtitan_s =
      analyze_pipeline_step(setup.model, setup.cluster, setup.profile, torchtitan_split).simulation.step_time_s;
  const double planned_s = result.best.analysis.simulation.step_time_s;
  CAPTURE(result.best.knobs);
  CHECK(planned_s < torchtitan_s);
}
