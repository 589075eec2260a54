// Tests of the pipeline search's balanced stage split (Note [Balanced stage split] in stage_balance.h): a heavy head
// by hand, no second split where torchtitan's is as good, and the search's answer beating torchtitan's split of the
// same point in simulation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "search_fixtures.h"
#include "pipeline_grid.h"
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

// llama3-8b on 4 x 8 H100s, pinned to pp 4 1F1B, TP 2, no checkpointing, with all the GPU's memory usable.
struct Pinned1F1B : testing::SearchCase {
  PipelineSearchOptions options;
  Pinned1F1B() : SearchCase("llama3-8b", "4x8xH100-80GB", 8192) {
    training.checkpointing = ActivationCheckpointing::none;
    training.global_batch = 32;  // one micro-batch per GPU, as the search takes it unpinned
    options.pipeline_degrees = {4};
    options.tensor_parallel_degrees = {2};
    options.schedule = PipelineScheduleKind::one_f_one_b;
    options.stages_per_rank = 1;
    options.pins.checkpointing = true;
    options.usable_bytes = cluster.gpu.memory_bytes;
  }
  PipelineSearchResult search() const { return search_pipeline_plans(model, cluster, profile, training, options); }
  // `planned` with torchtitan's split instead of its own.
  Plan with_torchtitan_split(Plan planned) const {
    planned.pipeline = default_pipeline(model, 4, PipelineScheduleKind::one_f_one_b, 1);
    return planned;
  }
  PipelineStepAnalysis simulate(const Plan& plan) const { return analyze_pipeline_step(model, cluster, profile, plan); }
};

std::int64_t fullest_bytes(const PipelineStepAnalysis& analysis) {
  std::int64_t fullest = 0;
  for (const PipelineRankSummary& rank : analysis.simulation.ranks) fullest = std::max(fullest, rank.device_peak_bytes);
  return fullest;
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
  StageBalanceInput input{layer_s, forward_s, {3, 3}, 2, 4, nullptr, false, {}};
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
  CHECK(balanced_stage_blocks(model, {layer_s, forward_s, {4, 4}, 2, 4, nullptr, false, {}}).empty());
  // Fewer blocks than stages: nothing to move.
  CHECK(balanced_stage_blocks(kinds_only(1), {{0, 1, 0, 0}, {0, 0, 0, 0}, {1, 0}, 2, 4, nullptr, false, {}}).empty());
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

TEST_CASE("balanced stage split: memory first where a split overflows, then time among the splits that fit") {
  // 6 blocks of 1 s, nothing else, pp 2, 4 micro-batches; a split fits where its last stage holds at most 2 blocks
  // (10 units of memory each against 25 usable). torchtitan's [3, 3] overflows by 5; [4, 2] fits at max(16, 8 + 4) =
  // 16 s and [5, 1] at max(20, 4 + 5) = 20 s: the descent takes [4, 2].
  const ModelSpec model = kinds_only(6);
  const std::vector<double> layer_s{0, 1, 1, 1, 1, 1, 1, 0, 0};
  StageBalanceInput input{layer_s, std::vector<double>(layer_s.size(), 0.0), {3, 3}, 2, 4, nullptr, false, {}};
  input.overflow_bytes = [](const std::vector<int>& blocks) {
    return std::max<std::int64_t>(0, 10 * blocks.back() - 25);
  };
  CHECK(balanced_stage_blocks(model, input) == std::vector<int>{4, 2});
  // No split fits (every stage holds a block): none.
  input.overflow_bytes = [](const std::vector<int>&) { return std::int64_t{1}; };
  CHECK(balanced_stage_blocks(model, input).empty());
}

TEST_CASE("balanced stage split: a point whose simulation overflows is repaired to a split that fits") {
  // llama3-8b on 4 x 8 H100s, pp 4 1F1B, TP 2, no checkpointing: the plan (here the time-balanced split) and the same
  // plan with torchtitan's split as simulated with all the memory, then the usable bytes set 1 GiB under the lesser
  // of their fullest ranks. Both overflow then, and the split that moves blocks off the fullest rank, its other
  // ranks' room taken, fits.
  Pinned1F1B setup;
  const PipelineSearchResult roomy = setup.search();
  REQUIRE(roomy.feasible);
  const PipelineStepAnalysis torchtitan = setup.simulate(setup.with_torchtitan_split(roomy.best.plan));
  const std::int64_t fullest = std::min(fullest_bytes(roomy.best.analysis), fullest_bytes(torchtitan));
  std::int64_t emptiest = std::numeric_limits<std::int64_t>::max();
  for (const PipelineRankSummary& rank : torchtitan.simulation.ranks) {
    emptiest = std::min(emptiest, rank.device_peak_bytes);
  }
  REQUIRE(fullest - emptiest > (std::int64_t{4} << 30));  // room on another rank to take blocks
  setup.options.usable_bytes = fullest - (std::int64_t{1} << 30);
  const PipelineSearchResult tight = setup.search();
  REQUIRE(tight.feasible);
  CAPTURE(roomy.best.knobs);
  CAPTURE(tight.best.knobs);
  CHECK(tight.best.knobs.find("balanced split") != std::string::npos);
  CHECK(fullest_bytes(tight.best.analysis) <= setup.options.usable_bytes);
  CHECK(tight.best.analysis.simulation.step_time_s >= roomy.best.analysis.simulation.step_time_s);
}

TEST_CASE("balanced stage split: the floor walk's peak holds 1F1B's pp - stage micro-batches") {
  // 1F1B on 4 ranks, 8 micro-batches, 1 GiB of activations per stage and micro-batch, nothing else: rank r peaks
  // holding 4 - r micro-batches (torch's warm-up), the count the memory estimate multiplies a stage's change by.
  const PipelineOrder order = pipeline_order(PipelineScheduleKind::one_f_one_b, 4, 1, 8);
  PipelineFloorPeaks peaks;
  const std::vector<std::int64_t> bytes =
      pipeline_live_floor_bytes(std::vector<std::int64_t>(4, std::int64_t{1} << 30), nullptr, order, nullptr, &peaks);
  REQUIRE(peaks.held_micro_batches.size() == 4);
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    CHECK(peaks.held_micro_batches[static_cast<std::size_t>(rank)][static_cast<std::size_t>(rank)] == 4 - rank);
    CHECK(bytes[static_cast<std::size_t>(rank)] == (std::int64_t{4 - rank} << 30));
  }
}

TEST_CASE("balanced stage split: repaired after a simulation overflowed, from the simulated peaks") {
  // llama3-8b on 4 x 8 H100s, pp 4 1F1B, TP 2, no checkpointing, torchtitan's split: with the usable bytes between
  // its fullest rank's memory floor and its simulated peak, the floors admit it and the simulation does not; the
  // repair from the simulated peaks gives a split whose own simulation fits.
  Pinned1F1B setup;
  const PipelineSearchResult roomy = setup.search();
  REQUIRE(roomy.feasible);
  Plan plan = setup.with_torchtitan_split(roomy.best.plan);
  const PipelineStepAnalysis simulated = setup.simulate(plan);
  const std::int64_t simulated_bytes = fullest_bytes(simulated);
  // The torchtitan point's memory floor, from a grid with all the memory.
  PipelineSearchResult counts;
  PipelineGrid roomy_grid(setup.model, setup.cluster, setup.profile, setup.options, counts);
  roomy_grid.add_points(1, setup.training);
  const auto torchtitan_point = [](PipelineGrid& grid) {
    const auto found = std::find_if(grid.points().begin(), grid.points().end(),
                                    [](const PipelinePoint& point) { return point.balanced_blocks.empty(); });
    REQUIRE(found != grid.points().end());
    return *found;
  };
  const std::int64_t floor_bytes = torchtitan_point(roomy_grid).memory_floor_bytes;
  CAPTURE(floor_bytes);
  CAPTURE(simulated_bytes);
  REQUIRE(simulated_bytes - floor_bytes > (std::int64_t{64} << 20));
  setup.options.usable_bytes = (floor_bytes + simulated_bytes) / 2;
  PipelineGrid grid(setup.model, setup.cluster, setup.profile, setup.options, counts);
  grid.add_points(1, setup.training);
  const PipelinePoint point = torchtitan_point(grid);
  const std::optional<PipelinePoint> repaired = grid.repaired(point, &simulated);
  REQUIRE(repaired.has_value());
  CHECK(repaired->repaired);
  CHECK(repaired->policy.stages != point.policy.stages);
  plan.pipeline = repaired->policy;
  const PipelineStepAnalysis fixed = setup.simulate(plan);
  CHECK(fullest_bytes(fixed) <= setup.options.usable_bytes);
  // A repaired point is not repaired again.
  CHECK_FALSE(grid.repaired(*repaired, &fixed).has_value());
}
