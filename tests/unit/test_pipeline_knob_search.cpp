// Tests of the pipeline search's knobs a user may set and may leave out (a knob left out is searched, one given is
// kept): Interleaved1F1B's stages per rank (Note [Virtual stages searched]) and the micro-batch (Note [Pipeline
// micro-batch]), both in planner/pipeline_grid.cpp.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "pipeline_search_case.h"
#include "search_pipeline.h"

using namespace shardplan;

namespace {

using Setup = testing::PipelineSearchCase;

}  // namespace

TEST_CASE("pipeline search: Interleaved1F1B's stages per rank searched where left out, fixed where pinned") {
  const Setup setup;
  // Note [Virtual stages searched]: llama3-8b's 32 blocks are 34 effective layers; at pp 2 every stage keeps 2 of them
  // up to 8 stages per rank (32 stages), at pp 8 only torchtitan's default 2 stages per rank are searched.
  const auto interleaved = [&](int degree, int stages_per_rank) {
    PipelineSearchOptions options = setup.options({degree});
    options.schedule = PipelineScheduleKind::interleaved_1f1b;
    options.stages_per_rank = stages_per_rank;
    return search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training, options);
  };
  const PipelineSearchResult searched = interleaved(2, 0);
  REQUIRE(searched.feasible);
  std::size_t pinned_candidates = 0;
  double best_pinned_s = std::numeric_limits<double>::infinity();
  int best_pinned_stages = 0;
  for (const int stages_per_rank : {2, 4, 8}) {
    const PipelineSearchResult pinned = interleaved(2, stages_per_rank);
    pinned_candidates += pinned.candidates;
    REQUIRE(pinned.feasible);
    CHECK(pinned.best.plan.pipeline.stages_per_rank == stages_per_rank);  // a pinned count is kept
    if (pinned.best.analysis.simulation.step_time_s < best_pinned_s) {
      best_pinned_s = pinned.best.analysis.simulation.step_time_s;
      best_pinned_stages = stages_per_rank;
    }
  }
  // The left-out count is the three pinned grids together, and its answer their fastest.
  CHECK(searched.candidates == pinned_candidates);
  CHECK(searched.best.analysis.simulation.step_time_s == best_pinned_s);
  CHECK(searched.best.plan.pipeline.stages_per_rank == best_pinned_stages);
  CHECK(best_pinned_stages > 2);  // the default is not the fastest here: what searching the count buys
  // pp 8: 4 stages per rank (32 stages) would leave stages of one effective layer; only the default is searched.
  CHECK(interleaved(8, 0).candidates == interleaved(8, 2).candidates);
  // Unpinned schedules take the counts too: 1F1B, Interleaved1F1B x 2, 4, 8 and InterleavedZeroBubble x 2 at pp 2.
  const PipelineSearchResult every = search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training,
                                                           setup.options({2}));
  REQUIRE(every.feasible);
  CHECK(every.best.analysis.simulation.step_time_s <= best_pinned_s);
}

TEST_CASE("pipeline search: the micro-batch searched where left out, fixed where pinned") {
  // Note [Pipeline micro-batch]: llama3-8b at 512 tokens, 512 sequences a step on 16 H100s, pp 2. Micro-batch 1
  // runs 64 micro-batches of small kernels; a larger one fewer, larger ones against a longer bubble.
  const Setup setup;
  TrainingConfig training = setup.training;
  training.seq_len = 512;
  training.global_batch = 512;
  const auto search = [&](std::int64_t pinned_micro_batch) {
    PipelineSearchOptions options = setup.options({2});
    TrainingConfig given = training;
    if (pinned_micro_batch > 0) {
      given.micro_batch = pinned_micro_batch;
      options.pins.micro_batch = true;  // --micro-batch N
    }
    return search_pipeline_plans(setup.model, setup.cluster, setup.profile, given, options);
  };
  const PipelineSearchResult searched = search(0);
  REQUIRE(searched.feasible);
  double best_pinned_s = std::numeric_limits<double>::infinity();
  std::int64_t best_pinned_micro_batch = 0;
  for (const std::int64_t micro_batch : {1, 2, 4, 8, 16, 32, 64}) {
    const PipelineSearchResult pinned = search(micro_batch);
    if (!pinned.feasible) continue;
    CHECK(pinned.best.plan.training.micro_batch == micro_batch);  // a pinned micro-batch is kept
    CHECK(pinned.candidates < searched.candidates);
    const double step_s = pinned.best.analysis.simulation.step_time_s;
    MESSAGE("micro-batch " << micro_batch << ": " << step_s << " s");
    if (step_s < best_pinned_s) {
      best_pinned_s = step_s;
      best_pinned_micro_batch = micro_batch;
    }
  }
  MESSAGE("searched: micro-batch " << searched.best.plan.training.micro_batch << ", "
                                   << searched.best.analysis.simulation.step_time_s << " s");
  // The left-out micro-batch is every pinned one's grid together: its answer their fastest.
  CHECK(searched.best.analysis.simulation.step_time_s == best_pinned_s);
  CHECK(searched.best.plan.training.micro_batch == best_pinned_micro_batch);
  CHECK(best_pinned_micro_batch > 1);  // torchtitan's default is not the fastest here: what searching it buys
}
