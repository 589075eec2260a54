// Tests of the pipeline search (Note [Pipeline search], [Pipeline floor], [Pipeline waves] in search_pipeline.h): the
// floor by hand, the floor never above a simulated step, pruning by a known step, thread-count invariance, and the
// answer being the fastest fitting candidate of the grid.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "cluster.h"
#include "communication_floor.h"
#include "context_parallel_lowering.h"
#include "model_presets.h"
#include "pipeline_search_case.h"
#include "search_pipeline.h"
#include "step_analysis.h"

using namespace shardplan;

namespace {

using Setup = testing::PipelineSearchCase;

// Each degree's grid searched alone (`narrow` keeps one degree of the joint options; `check` reads each part's
// answer with its degree): the parts' candidates summed, and the fastest answer among them.
struct GridParts {
  std::size_t candidates = 0;
  double best_s = std::numeric_limits<double>::infinity();
};
template <class Narrow, class Check>
GridParts search_grid_parts(const Setup& setup, const PipelineSearchOptions& joint, const std::vector<int>& degrees,
                            Narrow narrow, Check check) {
  GridParts parts;
  for (const int degree : degrees) {
    PipelineSearchOptions alone = joint;
    narrow(alone, degree);
    const PipelineSearchResult part =
        search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training, alone);
    parts.candidates += part.candidates;
    if (!part.feasible) continue;
    check(part, degree);
    parts.best_s = std::min(parts.best_s, part.best.analysis.simulation.step_time_s);
  }
  return parts;
}

}  // namespace

TEST_CASE("pipeline floor: the busiest rank's work, the last rank's wait, the fullest rank's activations") {
  // Four stages of 1, 2, 3, 4 s per micro-batch on pp 4 (one each), 8 micro-batches: the busiest rank does 8 x 4 =
  // 32 s; the last rank's 32 s plus stages 0-2's 1 + 2 + 3 = 6 s before its first and after its last op: 38 s.
  CHECK(pipeline_step_floor_s({1, 2, 3, 4}, 4, 8) == doctest::Approx(38.0));
  // The same stages on pp 2 with two each (stage s on rank s mod 2): ranks hold 1 + 3 = 4 and 2 + 4 = 6 s; the busy
  // bound 8 x 6 = 48 s, the last rank's 48 + stage 0's 1 s = 49 s.
  CHECK(pipeline_step_floor_s({1, 2, 3, 4}, 2, 8) == doctest::Approx(49.0));
  // A heavy first stage: the busy bound wins (8 x 10 = 80 s against 8 x 1 + 10 = 18 s).
  CHECK(pipeline_step_floor_s({10, 1}, 2, 8) == doctest::Approx(80.0));
  // Memory: stages holding 10, 20, 30, 40 bytes per micro-batch on pp 4, 8 micro-batches. 1F1B keeps 4 − r in flight
  // (torch's warm-up of pp − 1 − r forwards, then one more): 40, 60, 60, 40; GPipe all 8 (8 x 40 = 320). Two virtual
  // stages per rank on pp 2: rank 0 runs stage 0's micro-batches 0, 1, stage 2's 0, 1 (2 x 10 + 2 x 30 = 80), then
  // stage 0's micro-batch 2 (90) before its first backward.
  using Kind = PipelineScheduleKind;
  using Bytes = std::vector<std::int64_t>;
  CHECK(pipeline_live_floor_bytes({10, 20, 30, 40}, nullptr, 4, Kind::one_f_one_b, 8) == Bytes{40, 60, 60, 40});
  CHECK(pipeline_live_floor_bytes({10, 20, 30, 40}, nullptr, 4, Kind::gpipe, 8) == Bytes{80, 160, 240, 320});
  CHECK(pipeline_live_floor_bytes({10, 20, 30, 40}, nullptr, 2, Kind::interleaved_1f1b, 8).at(0) == 90);
  CHECK(pipeline_live_floor_bytes({10, 20, 30, 40}, nullptr, 4, Kind::one_f_one_b, 2) == Bytes{20, 40, 60, 40});
  // With FSDP's states on 2 ranks of one stage each under 1F1B, 4 micro-batches: rank 1 (the last stage) runs F B
  // F B ...: gathered 100 from its first forward, activations 20 each, the gradient 50 from its first backward, so
  // 100 + 20 (first forward), then 100 + 50 (after the backward), then 100 + 50 + 20 = 170, plus its shards 7.
  const PipelineStatesFloor states{{5, 7}, {100, 100}, {50, 50}};
  CHECK(pipeline_live_floor_bytes({10, 20}, &states, 2, Kind::one_f_one_b, 4).at(1) == 170 + 7);
  // Rank 0 keeps 2 in flight: 100 + 2 x 10 before its first backward, then 100 + 50 + 2 x 10 in the steady state.
  CHECK(pipeline_live_floor_bytes({10, 20}, &states, 2, Kind::one_f_one_b, 4).at(0) == 170 + 5);
  // A split backward (Note [Split backward lowering]) keeps the activations to the weight part: under the
  // zero-bubble order rank 1 (one stage per rank) runs F0 I0 F1 I1 W0 F2 I2 W1 ..., so micro-batch 1's 20 comes
  // before micro-batch 0's weight part: 100 + 2 x 20, then 100 + 50 + 20 after W0, and 100 + 50 + 2 x 20 = 190 after
  // F2.
  // The first bound alone for its step (the busiest rank: 8 x 4).
  CHECK(pipeline_live_floor_bytes({10, 20}, &states, 2, Kind::interleaved_zero_bubble, 4).at(1) == 190 + 7);
  // torch.distributed.pipelining's buffers (Note [Pipeline buffers]): a boundary tensor of 3 and a last-stage output
  // of 5 per micro-batch. Rank 0 (first stage) keeps each output in its forward cache (10 + 3 = 13 per micro-batch
  // in flight, 2 of them: 26) and 4 gradient receive buffers (12); rank 1 (last stage) holds 20 − 3 (its input is a
  // receive buffer) and keeps every output: after F3, 4 x 5 + 17 = 37, beside its 4 input receive buffers (12).
  const PipelineBufferBytes buffers{3, 5};
  CHECK(pipeline_live_floor_bytes({10, 20}, nullptr, 2, Kind::one_f_one_b, 4, &buffers) == Bytes{26 + 12, 37 + 12});
  CHECK(pipeline_step_floor_s({1, 2, 3, 4}, 4, 8, true) == doctest::Approx(32.0));
  // The order replayed: stages (forward, backward) of (1, 1), (3, 3), (1, 1) s on pp 3 under 1F1B, 2 micro-batches.
  // Rank 0 runs F0 F0 at 0-1, 1-2; rank 1 F1 F1 at 1-4, 4-7; rank 2 F2 at 4-5, B2 5-6, F2 7-8 (after rank 1's second
  // forward), B2 8-9; rank 1 B1 7-10, 10-13; rank 0 B0 10-11, 13-14: 14 s, where the bounds above give 12 (the busy
  // rank's 2 x 6, the last rank's 2 x 2 + 2 + 6) — the middle rank's way in and out is the bubble they miss.
  const StageFloors heavy_middle{{2, 6, 2}, {1, 3, 1}, {0, 0, 0}, {{}, {}, {}}, {}};
  CHECK(pipeline_step_floor_s(heavy_middle.compute_s, 3, 2) == doctest::Approx(12.0));
  CHECK(pipeline_replay_floor_s(heavy_middle, pipeline_order(Kind::one_f_one_b, 3, 1, 2)) == doctest::Approx(14.0));
  CHECK(pipeline_replay_floor_s(heavy_middle, pipeline_order(Kind::interleaved_zero_bubble, 3, 1, 2)) == 0.0);
  // Each rank's compute stretched by its layers' communication: two stages of 4 s on pp 2 (1 s of it dispatch), 3 s
  // of ring sends each, 2 micro-batches, slowdown 1.5: K = 6, D = 2, U = 6 s per rank, so 6 + 2 + (1 − 1/1.5) x
  // (6 − 2) = 9.33 s; without the dispatch 8 + 6 / 3 = 10 s; none where overlap speeds compute up.
  std::array<double, kStreamCount> ring{};
  ring[static_cast<std::size_t>(StreamKind::p2p)] = 3;
  StageFloors stretched{{4, 4}, {2, 2}, {1, 1}, {ring, ring}, {}};
  CHECK(pipeline_stretch_floor_s(stretched, 2, 2, 1.5) == doctest::Approx(6 + 2 + 4.0 / 3));
  stretched.dispatch_s = {0, 0};
  CHECK(pipeline_stretch_floor_s(stretched, 2, 2, 1.5) == doctest::Approx(10.0));
  CHECK(pipeline_stretch_floor_s(stretched, 2, 2, 0.9) == 0.0);
}

TEST_CASE("pipeline floor: never above the simulated step of the plans it prunes") {
  const Setup setup;
  for (const int degree : {2, 4}) {
    for (const auto& [schedule, stages_per_rank] :
         std::vector<std::pair<PipelineScheduleKind, int>>{{PipelineScheduleKind::one_f_one_b, 1},
                                                           {PipelineScheduleKind::gpipe, 1},
                                                           {PipelineScheduleKind::interleaved_1f1b, 2},
                                                           {PipelineScheduleKind::interleaved_zero_bubble, 2}}) {
      for (const char* ac : {"none", "full"}) {
        CAPTURE(degree);
        CAPTURE(ac);
        KnobSetting knobs{ShardingStrategy{}, ac, 1, false};
        TrainingConfig training = setup.training;
        training.global_batch = setup.cluster.world_size();
        Plan plan = plan_for_knobs(setup.model, setup.cluster.world_size() / degree, training, knobs);
        plan.pipeline = default_pipeline(setup.model, degree, schedule, stages_per_rank);
        const PipelineStepAnalysis analysis = analyze_pipeline_step(setup.model, setup.cluster, setup.profile, plan);
        const StageFloors stages = stage_floors(
            setting_floors(setup.model, setup.cluster, setup.profile, training, knobs), plan.pipeline.stages);
        const std::vector<std::int64_t>& stage_held_bytes = stages.held_bytes;
        const bool split = schedule == PipelineScheduleKind::interleaved_zero_bubble;
        const double floor_s = pipeline_step_floor_s(stages.compute_s, degree, plan.grad_accumulation_steps, split);
        // A bound worth its name (a split backward under AC recomputes once per weight group: a looser one).
        CHECK(floor_s > (split && std::string(ac) == "full" ? 0.25 : 0.5) * analysis.simulation.step_time_s);
        CHECK(floor_s <= analysis.simulation.step_time_s * (1 + 1e-9));
        // The order replayed with the stages' floors: below the simulated step too, and at least the bounds above
        // (it holds every rank's work and the last rank's way in and out); 0 for a split backward.
        const double replay_s = pipeline_replay_floor_s(
            stages, pipeline_order(schedule, degree, stages_per_rank, plan.grad_accumulation_steps));
        MESSAGE("pp " << degree << " " << std::string(to_string(schedule)) << " AC " << std::string(ac) << ": floors "
                      << floor_s << " s, replayed " << replay_s << " s, simulated " << analysis.simulation.step_time_s
                      << " s");
        CHECK(replay_s <= analysis.simulation.step_time_s * (1 + 1e-9));
        CHECK((split ? replay_s == 0 : replay_s >= floor_s * (1 - 1e-9)));
        CHECK(pipeline_stretch_floor_s(stages, degree, plan.grad_accumulation_steps,
                                       least_overlap_compute_slowdown(setup.profile)) <=
              analysis.simulation.step_time_s * (1 + 1e-9));
        // The memory floor of Note [Pipeline floor]: never above the fullest rank's simulated device peak.
        std::int64_t fullest_bytes = 0;
        for (const PipelineRankSummary& rank : analysis.simulation.ranks) {
          fullest_bytes = std::max(fullest_bytes, rank.device_peak_bytes);
        }
        const PipelineStatesFloor states =
            pipeline_states_floor(setup.model, training, knobs.strategy, plan.pipeline,
                                  setup.cluster.world_size() / degree, setup.cluster.gpus_per_node);
        const std::vector<std::int64_t> live_bytes =
            pipeline_live_floor_bytes(stage_held_bytes, &states, degree, schedule, plan.grad_accumulation_steps);
        // With torch.distributed.pipelining's buffers (Note [Pipeline buffers]): higher, still never above.
        TrainingConfig rank_training = training;
        rank_training.micro_batch = knobs.micro_batch;
        const PipelineBufferBytes buffers = pipeline_buffer_bytes(setup.model, rank_training, 1);
        const std::vector<std::int64_t> buffered_bytes = pipeline_live_floor_bytes(
            stage_held_bytes, &states, degree, schedule, plan.grad_accumulation_steps, &buffers);
        REQUIRE(live_bytes.size() == analysis.simulation.ranks.size());
        for (std::size_t rank = 0; rank < live_bytes.size(); ++rank) {
          CHECK(states.rank_states_bytes[rank] > 0);
          CHECK(live_bytes[rank] > states.rank_states_bytes[rank]);
          CHECK(setup.profile.context_overhead_bytes + live_bytes[rank] <=
                analysis.simulation.ranks[rank].device_peak_bytes);
          CHECK(buffered_bytes[rank] > live_bytes[rank]);
          CHECK(setup.profile.context_overhead_bytes + buffered_bytes[rank] <=
                analysis.simulation.ranks[rank].device_peak_bytes);
          // A bound worth its name: within a third of the simulated peak.
          CHECK(setup.profile.context_overhead_bytes + live_bytes[rank] >
                analysis.simulation.ranks[rank].device_peak_bytes * 2 / 3);
        }
      }
    }
  }
}

TEST_CASE("pipeline search: the fastest fitting candidate, pruned by a known step, the same on any thread count") {
  const Setup setup;
  const PipelineSearchResult one = search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training,
                                                         setup.options({2, 4}, 1));
  REQUIRE(one.feasible);
  CHECK(one.best.fits);
  CHECK(one.best.plan.pipeline.degree >= 2);
  CHECK(one.simulated + one.beaten_by_floor + one.refused >= one.candidates);
  const PipelineSearchResult three = search_pipeline_plans(setup.model, setup.cluster, setup.profile,
                                                           setup.training, setup.options({2, 4}, 3));
  REQUIRE(three.feasible);
  CHECK(three.best.knobs == one.best.knobs);
  CHECK(three.best.analysis.simulation.step_time_s == one.best.analysis.simulation.step_time_s);
  CHECK(three.simulated == one.simulated);
  // The answer is the best of its grid: each single-degree, single-schedule search finds nothing faster.
  for (const int degree : {2, 4}) {
    for (const auto schedule : {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::interleaved_1f1b}) {
      PipelineSearchOptions narrow = setup.options({degree});
      narrow.schedule = schedule;
      const PipelineSearchResult part =
          search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training, narrow);
      if (part.feasible) CHECK(part.best.analysis.simulation.step_time_s >= one.best.analysis.simulation.step_time_s);
    }
  }
  // A known step no candidate can beat: every point proven by its floor, none simulated.
  PipelineSearchOptions known = setup.options({2, 4});
  known.known_step_s = 1e-6;
  const PipelineSearchResult pruned =
      search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training, known);
  CHECK_FALSE(pruned.feasible);
  CHECK(pruned.simulated == 0);
  CHECK(pruned.beaten_by_floor > 0);
  // Too little memory for any rank: nothing fits.
  PipelineSearchOptions tight = setup.options({2, 4});
  tight.usable_bytes = 1 << 30;
  CHECK_FALSE(search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training, tight).feasible);
}

TEST_CASE("pipeline search: degree candidates divide the world and leave every rank 4 blocks") {
  const Setup setup;
  // llama3-8b's 32 blocks: up to pp 8 (4 blocks per rank), on 16 GPUs.
  CHECK(pipeline_degree_candidates(setup.model, setup.cluster) == std::vector<int>{2, 4, 8});
  const Cluster six = parse_cluster("6xH100-80GB", HardwareCatalog::builtin());
  CHECK(pipeline_degree_candidates(setup.model, six) == std::vector<int>{2});
  const Cluster many = parse_cluster("32x8xH100-80GB", HardwareCatalog::builtin());
  CHECK(pipeline_degree_candidates(preset_model("llama3.1-405b"), many) == std::vector<int>{2, 4, 8, 16});
}

TEST_CASE("pipeline search: context-parallel degrees in the grid, the answer the best of each degree's") {
  Setup setup;
  setup.model = preset_model("llama3.1-8b");  // 131,072 positions
  setup.training.seq_len = 32768;  // long enough that one sequence's activations press on memory
  setup.training.global_batch = 8;
  PipelineSearchOptions joint = setup.options({2, 4});
  joint.tensor_parallel_degrees = {1, 2};
  joint.context_parallel_degrees = {1, 2, 4};
  const PipelineSearchResult both =
      search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training, joint);
  INFO("candidates " << both.candidates << ", simulated " << both.simulated << ", refused " << both.refused
                     << ", over memory " << both.over_memory_floor);
  REQUIRE(both.feasible);
  const auto context_parallel_alone = [](PipelineSearchOptions& alone, int degree) {
    alone.context_parallel_degrees = {degree};
  };
  const GridParts parts = search_grid_parts(
      setup, joint, {1, 2, 4}, context_parallel_alone, [](const PipelineSearchResult& part, int degree) {
        CHECK(std::max(1, part.best.plan.context_parallel.degree) == degree);
      });
  // Every degree's points are in the joint grid, and its answer is the fastest of them.
  CHECK(both.candidates == parts.candidates);
  CHECK(both.best.analysis.simulation.step_time_s == doctest::Approx(parts.best_s).epsilon(1e-12));
  MESSAGE("joint grid: " << both.best.knobs << ", step " << both.best.analysis.simulation.step_time_s << " s");
}

TEST_CASE("pipeline floor under context parallelism: the CP rank's ring in it, never above the simulated step") {
  Setup setup;
  setup.model = preset_model("llama3.1-8b");
  setup.training.seq_len = 32768;
  for (const int context_parallel : {2, 4}) {
    for (const char* ac : {"none", "full"}) {
      CAPTURE(context_parallel);
      CAPTURE(ac);
      const int degree = 2;
      KnobSetting knobs{ShardingStrategy{}, ac, 1, false};
      TrainingConfig training = setup.training;
      training.global_batch = setup.cluster.world_size();  // the grid's default: one micro-batch per GPU
      const TrainingConfig share = context_parallel_share_training(training, context_parallel);
      Plan plan = plan_for_knobs(setup.model, setup.cluster.world_size() / degree, share, knobs);
      plan.training = training;
      plan.context_parallel.degree = context_parallel;
      plan.pipeline = default_pipeline(setup.model, degree, PipelineScheduleKind::one_f_one_b, 1);
      // The batch's sequences over the data-parallel ranks less cp (a CP group shares each sequence).
      plan.grad_accumulation_steps =
          static_cast<int>(training.global_batch / (setup.cluster.world_size() / degree / context_parallel));
      const PipelineStepAnalysis analysis = analyze_pipeline_step(setup.model, setup.cluster, setup.profile, plan);
      MicroBatchFloors ring = micro_batch_floors(setup.model, setup.cluster, setup.profile, share, knobs,
                                                 context_parallel);
      MicroBatchFloors alone = micro_batch_floors(setup.model, setup.cluster, setup.profile, share, knobs);
      const auto step_floor_s = [&](const SettingFloors& floors) {
        const StageFloors stages = stage_floors(floors, plan.pipeline.stages);
        return pipeline_step_floor_s(stages.compute_s, degree, plan.grad_accumulation_steps);
      };
      const double ring_floor_s = step_floor_s(ring.floors), share_floor_s = step_floor_s(alone.floors);
      MESSAGE("cp " << context_parallel << " AC " << std::string(ac) << ": floor with the ring " << ring_floor_s
                    << " s, the share's alone " << share_floor_s << " s, simulated "
                    << analysis.simulation.step_time_s << " s");
      CHECK(ring_floor_s > share_floor_s);  // every ring step's attention, not one
      CHECK(ring_floor_s <= analysis.simulation.step_time_s * (1 + 1e-9));
      CHECK(ring_floor_s > 0.5 * analysis.simulation.step_time_s);
      // The order replayed with the ring's stage floors: below the simulated step as well.
      const double replay_s =
          pipeline_replay_floor_s(stage_floors(ring.floors, plan.pipeline.stages),
                                  pipeline_order(PipelineScheduleKind::one_f_one_b, degree, 1,
                                                 plan.grad_accumulation_steps));
      CHECK(replay_s >= ring_floor_s * (1 - 1e-9));
      CHECK(replay_s <= analysis.simulation.step_time_s * (1 + 1e-9));
      // Each rank stretched by its ring sends: above its compute alone (the busiest rank's, the bound a split
      // backward takes), below the simulated step.
      const StageFloors ring_stages = stage_floors(ring.floors, plan.pipeline.stages);
      // Memory with the pipeline's own buffers of the CP rank's rows (Note [Pipeline buffers]): never above a rank's
      // simulated device peak.
      TrainingConfig rank_training = share;
      rank_training.micro_batch = knobs.micro_batch;
      const PipelineBufferBytes buffers = pipeline_buffer_bytes(setup.model, rank_training, 1);
      const PipelineStatesFloor states = pipeline_states_floor(
          setup.model, share, knobs.strategy, plan.pipeline, setup.cluster.world_size() / degree,
          setup.cluster.gpus_per_node);
      const std::vector<std::int64_t> live_bytes =
          pipeline_live_floor_bytes(ring_stages.held_bytes, &states, degree, PipelineScheduleKind::one_f_one_b,
                                    plan.grad_accumulation_steps, &buffers);
      REQUIRE(live_bytes.size() == analysis.simulation.ranks.size());
      for (std::size_t rank = 0; rank < live_bytes.size(); ++rank) {
        CHECK(setup.profile.context_overhead_bytes + live_bytes[rank] <=
              analysis.simulation.ranks[rank].device_peak_bytes);
      }
      const double stretch_s = pipeline_stretch_floor_s(ring_stages, degree, plan.grad_accumulation_steps,
                                                        least_overlap_compute_slowdown(setup.profile));
      MESSAGE("cp " << context_parallel << " AC " << std::string(ac) << ": replayed " << replay_s
                    << " s, stretched " << stretch_s << " s");
      CHECK(stretch_s > pipeline_step_floor_s(ring_stages.compute_s, degree, plan.grad_accumulation_steps, true));
      CHECK(stretch_s <= analysis.simulation.step_time_s * (1 + 1e-9));
    }
  }
}

// Note [Pipeline search]: a model with experts is pipelined at the expert-parallel degrees the FSDP search takes, each
// point's training carrying its degree; the floors see the degree (the gathered experts are the rank's own).
TEST_CASE("pipeline search: expert-parallel degrees in the grid, their floors below the simulated plans") {
  Setup setup;
  setup.model = preset_model("mixtral-8x7b");
  setup.cluster = parse_cluster("4x8xH100-80GB", HardwareCatalog::builtin());
  setup.profile = profile_from_cluster(setup.cluster);
  PipelineSearchOptions joint = setup.options({2});
  joint.tensor_parallel_degrees = {1};
  joint.expert_parallel_degrees = {1, 8};
  const PipelineSearchResult both =
      search_pipeline_plans(setup.model, setup.cluster, setup.profile, setup.training, joint);
  REQUIRE(both.feasible);
  CHECK(both.expert_parallel_degrees == std::vector<int>{1, 8});
  const GridParts parts = search_grid_parts(
      setup, joint, {1, 8}, [](PipelineSearchOptions& alone, int degree) { alone.expert_parallel_degrees = {degree}; },
      [](const PipelineSearchResult& part, int degree) {
        CHECK(part.best.plan.training.expert_parallel_degree == degree);
        CHECK((part.best.knobs.find("EP 8") != std::string::npos) == (degree == 8));
      });
  CHECK(both.candidates == parts.candidates);
  CHECK(both.best.analysis.simulation.step_time_s == doctest::Approx(parts.best_s).epsilon(1e-12));
  MESSAGE("EP grid: " << both.best.knobs << ", step " << both.best.analysis.simulation.step_time_s << " s");
  // The floors of an EP 8 point against its simulated plan: step and every rank's device peak.
  KnobSetting knobs{ShardingStrategy{}, "full", 1, false};
  TrainingConfig training = setup.training;
  training.global_batch = setup.cluster.world_size();
  training.expert_parallel_degree = 8;
  const int degree = 2;
  Plan plan = plan_for_knobs(setup.model, setup.cluster.world_size() / degree, training, knobs);
  plan.pipeline = default_pipeline(setup.model, degree, PipelineScheduleKind::one_f_one_b, 1);
  const PipelineStepAnalysis analysis = analyze_pipeline_step(setup.model, setup.cluster, setup.profile, plan);
  const StageFloors stages =
      stage_floors(setting_floors(setup.model, setup.cluster, setup.profile, training, knobs), plan.pipeline.stages);
  CHECK(pipeline_step_floor_s(stages.compute_s, degree, plan.grad_accumulation_steps) <=
        analysis.simulation.step_time_s * (1 + 1e-9));
  CHECK(pipeline_replay_floor_s(
            stages, pipeline_order(PipelineScheduleKind::one_f_one_b, degree, 1, plan.grad_accumulation_steps)) <=
        analysis.simulation.step_time_s * (1 + 1e-9));
  // Stretched by the experts' all-to-alls: above the busiest rank's compute alone.
  const double stretch_s = pipeline_stretch_floor_s(stages, degree, plan.grad_accumulation_steps,
                                                    least_overlap_compute_slowdown(setup.profile));
  CHECK(stretch_s > pipeline_step_floor_s(stages.compute_s, degree, plan.grad_accumulation_steps, true));
  CHECK(stretch_s <= analysis.simulation.step_time_s * (1 + 1e-9));
  const PipelineStatesFloor states = pipeline_states_floor(setup.model, training, knobs.strategy, plan.pipeline,
                                                           setup.cluster.world_size() / degree,
                                                           setup.cluster.gpus_per_node);
  TrainingConfig without_experts_split = training;
  without_experts_split.expert_parallel_degree = 1;
  const PipelineStatesFloor gathered_all = pipeline_states_floor(
      setup.model, without_experts_split, knobs.strategy, plan.pipeline, setup.cluster.world_size() / degree,
      setup.cluster.gpus_per_node);
  CHECK(states.stage_gathered_bytes.front() < gathered_all.stage_gathered_bytes.front());  // only its own experts
  const std::vector<std::int64_t> live_bytes = pipeline_live_floor_bytes(
      stages.held_bytes, &states, degree, PipelineScheduleKind::one_f_one_b, plan.grad_accumulation_steps);
  REQUIRE(live_bytes.size() == analysis.simulation.ranks.size());
  for (std::size_t rank = 0; rank < live_bytes.size(); ++rank) {
    CHECK(setup.profile.context_overhead_bytes + live_bytes[rank] <=
          analysis.simulation.ranks[rank].device_peak_bytes);
  }
}
