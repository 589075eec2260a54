// Tests of the pipeline micro-batch orders (Note [Pipeline orders]): torch's warmup counts and action sequences, every
// order replayed without deadlock over a grid of shapes, and the replayed step against the published bubble formulas.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "errors.h"
#include "pipeline_order.h"

using namespace shardplan;

namespace {

std::string spelled(const std::vector<PipelineAction>& actions) {
  std::string text;
  for (const PipelineAction& action : actions) {
    text += (text.empty() ? "" : " ") + std::to_string(action.stage) + to_string(action.kind) +
            std::to_string(action.micro_batch);
  }
  return text;
}

}  // namespace

TEST_CASE("pipeline order: 1F1B warms up min(M, pp - stage) forwards, as torch's Schedule1F1B") {
  const PipelineOrder order = pipeline_order(PipelineScheduleKind::one_f_one_b, 4, 1, 6);
  // Stage 0: 4 warmup forwards; stage 3 (the last): 1, then backward and forward in turn.
  CHECK(spelled(order.by_rank[0]) == "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5");
  CHECK(spelled(order.by_rank[3]) == "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5");
  const PipelineReplay replay = replay_pipeline_order(order, 1, 1, 1);
  CHECK(replay.peak_in_flight_by_stage == std::vector<int>{4, 3, 2, 1});  // pp - stage micro-batches of activations
  const PipelineReplay gpipe = replay_pipeline_order(pipeline_order(PipelineScheduleKind::gpipe, 4, 1, 6), 1, 1, 1);
  CHECK(gpipe.peak_in_flight_by_stage == std::vector<int>{6, 6, 6, 6});  // GPipe holds every micro-batch
}

TEST_CASE("pipeline order: GPipe and 1F1B take (M + pp - 1)(tF + tB); the bubble is (pp - 1) / (M + pp - 1)") {
  // Huang et al. (GPipe, arXiv:1811.06965) and Narayanan et al. (arXiv:2104.04473, section 2.2): with equal stages
  // the step is (M + p - 1) forward-backward slots; 1F1B changes the memory, not the bubble.
  for (const auto kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b}) {
    for (int pp : {2, 4, 8}) {
      for (int micro : {1, 4, 8, 16}) {
        CAPTURE(to_string(kind));
        CAPTURE(pp);
        CAPTURE(micro);
        const PipelineReplay replay = replay_pipeline_order(pipeline_order(kind, pp, 1, micro), 1.0, 1.0, 1.0);
        CHECK(replay.makespan == doctest::Approx((micro + pp - 1) * 3.0));
        CHECK(replay.bubble_fraction() == doctest::Approx(double(pp - 1) / (micro + pp - 1)));
      }
    }
  }
}

TEST_CASE("pipeline order: interleaved 1F1B cuts the bubble by the virtual stages, (pp - 1)(tF + tB) / v") {
  // Narayanan et al. (arXiv:2104.04473, section 2.2.2): with v stages per rank, each 1/v of a rank's layers, the
  // bubble is (p - 1)(tF + tB) / v, where tF, tB are a whole rank's per micro-batch; M a multiple of p.
  for (int pp : {2, 4, 8}) {
    for (int virtual_stages : {1, 2, 4}) {
      for (int rounds : {1, 2, 3}) {
        const int micro = rounds * pp;
        CAPTURE(pp);
        CAPTURE(virtual_stages);
        CAPTURE(micro);
        const PipelineOrder order = pipeline_order(PipelineScheduleKind::interleaved_1f1b, pp, virtual_stages, micro);
        const double forward_s = 1.0 / virtual_stages, backward_s = 2.0 / virtual_stages;
        const PipelineReplay replay = replay_pipeline_order(order, forward_s, backward_s / 2, backward_s / 2);
        CHECK(replay.makespan == doctest::Approx(micro * 3.0 + (pp - 1) * 3.0 / virtual_stages));
      }
    }
  }
  // Interleaving runs faster than 1F1B on the same ranks and micro-batches (torchtitan's Table 5 ordering).
  const double plain =
      replay_pipeline_order(pipeline_order(PipelineScheduleKind::one_f_one_b, 8, 1, 16), 1, 1, 1).makespan;
  const double interleaved =
      replay_pipeline_order(pipeline_order(PipelineScheduleKind::interleaved_1f1b, 8, 2, 16), 0.5, 0.5, 0.5).makespan;
  CHECK(interleaved < plain);
}

TEST_CASE("pipeline order: zero bubble (ZB-H1) fills the bubble with weight gradients: (pp - 1)(tF + tI - tW)") {
  // Qi et al., "Zero Bubble Pipeline Parallelism" (arXiv:2401.10241), section 3.1: ZB-H1's bubble is
  // (p - 1)(T_F + T_B - T_W), a third of 1F1B's where T_F = T_B = T_W, at 1F1B's peak activation memory.
  for (int pp : {2, 4, 8}) {
    for (int rounds : {1, 2, 4}) {
      const int micro = rounds * pp;
      CAPTURE(pp);
      CAPTURE(micro);
      const PipelineOrder order = pipeline_order(PipelineScheduleKind::interleaved_zero_bubble, pp, 1, micro);
      const PipelineReplay replay = replay_pipeline_order(order, 1.0, 1.0, 1.0);
      CHECK(replay.makespan == doctest::Approx(micro * 3.0 + (pp - 1) * 1.0));
      const PipelineReplay one_f_one_b =
          replay_pipeline_order(pipeline_order(PipelineScheduleKind::one_f_one_b, pp, 1, micro), 1.0, 1.0, 1.0);
      CHECK(replay.makespan < one_f_one_b.makespan);
      // ZB-H1 keeps 1F1B's peak, the first stage's pp micro-batches; later stages hold more than under 1F1B (their
      // weight gradients deferred), up to that peak.
      const auto most = [](const std::vector<int>& peaks) { return *std::max_element(peaks.begin(), peaks.end()); };
      CHECK(most(replay.peak_in_flight_by_stage) == most(one_f_one_b.peak_in_flight_by_stage));
    }
  }
}

TEST_CASE("pipeline order: every order completes, each action once, over a grid of shapes") {
  for (const auto kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b,
                          PipelineScheduleKind::interleaved_1f1b, PipelineScheduleKind::interleaved_zero_bubble}) {
    const bool interleaved =
        kind == PipelineScheduleKind::interleaved_1f1b || kind == PipelineScheduleKind::interleaved_zero_bubble;
    for (int pp = 1; pp <= 8; ++pp) {
      for (int virtual_stages = 1; virtual_stages <= (interleaved ? 4 : 1); ++virtual_stages) {
        for (int micro = 1; micro <= 17; ++micro) {
          if (interleaved && micro % std::max(1, micro / pp) != 0) {
            CHECK_THROWS_AS(pipeline_order(kind, pp, virtual_stages, micro), InputError);
            continue;
          }
          CAPTURE(to_string(kind));
          CAPTURE(pp);
          CAPTURE(virtual_stages);
          CAPTURE(micro);
          CHECK_NOTHROW(replay_pipeline_order(pipeline_order(kind, pp, virtual_stages, micro), 1.0, 1.0, 0.5));
        }
      }
    }
  }
}

TEST_CASE("pipeline order: bad shapes and names refuse in one line") {
  CHECK_THROWS_AS(pipeline_order(PipelineScheduleKind::one_f_one_b, 4, 2, 8), InputError);  // one stage per rank
  CHECK_THROWS_AS(pipeline_order(PipelineScheduleKind::gpipe, 0, 1, 8), InputError);
  CHECK(pipeline_schedule_from_string("interleaved1f1b", "--pipeline-schedule") ==
        PipelineScheduleKind::interleaved_1f1b);  // torch's lookup is case-insensitive
  CHECK_THROWS_WITH_AS(pipeline_schedule_from_string("2F2B", "--pipeline-schedule"),
                       doctest::Contains("--pipeline-schedule: unknown pipeline schedule '2F2B'"), InputError);
  // A hand-made order that waits for a backward that never comes is caught.
  PipelineOrder broken = pipeline_order(PipelineScheduleKind::one_f_one_b, 2, 1, 2);
  std::swap(broken.by_rank[1][0], broken.by_rank[1][1]);  // stage 1 backward before its forward
  CHECK_THROWS_AS(replay_pipeline_order(broken, 1, 1, 1), InternalError);
}
