// Tests of the search over context parallelism (Note [Context-parallel search], [Context-parallel floors] in
// planner/search_context_parallel.cpp): the CP rank's floors below every CP plan's simulated step and peak, above the
// share's, the degree search finding a faster plan once the settings that cannot win are proven away, and a pinned
// degree searched again where the share's best overflows with its ring (Note [Fixed context parallel degree]).
#include <doctest/doctest.h>

#include <limits>
#include <string>

#include "cluster.h"
#include "communication_floor.h"
#include "context_parallel_lowering.h"
#include "memory_headroom.h"
#include "model_presets.h"
#include "search_context_parallel.h"
#include "search_fixtures.h"
#include "setting_floor_cache.h"
#include "step_analysis.h"

using namespace shardplan;

namespace {

// llama3.1-8b at 131,072 tokens on 16 H100s, one sequence per GPU at cp 1 (Note [Equal global batch]).
struct Setup : testing::SearchCase {
  Setup() : SearchCase("llama3.1-8b", "2x8xH100-80GB", 131072) { training.global_batch = 16; }
};

}  // namespace

TEST_CASE("context-parallel floors: the CP rank's program with its ring, below every CP plan's step and peak") {
  const Setup setup;
  // No cap on what kept units hold (Note [Regather floor] adds nothing then): the floor holds for any plan.
  const std::int64_t keepable_bytes = std::numeric_limits<std::int64_t>::max() / 4;
  for (const int degree : {2, 4, 8}) {
    for (const std::string ac : {"none", "selective-op", "full"}) {
      for (const ShardingStrategy& strategy : {ShardingStrategy{}, parse_strategy("shard_grad_op")}) {
        const KnobSetting knobs{strategy, ac, 1, false};
        CAPTURE(degree);
        CAPTURE(knobs.label());
        const TrainingConfig share = context_parallel_share_training(setup.training, degree);
        const SettingFloors ring =
            cached_setting_floors(nullptr, setup.model, setup.cluster, setup.profile, share, knobs, degree);
        const SettingFloors alone =
            cached_setting_floors(nullptr, setup.model, setup.cluster, setup.profile, share, knobs);
        const CommunicationFloor communication =
            communication_floor(setup.model, setup.cluster, setup.profile, share, knobs);
        const double ring_floor_s = setting_step_floor_s(ring, communication, keepable_bytes, setup.profile);
        const double share_floor_s = setting_step_floor_s(alone, communication, keepable_bytes, setup.profile);
        // The CP plan as the search restores it (restore_context_parallel): the share's plan, the whole sequence back.
        Plan plan = plan_for_knobs(setup.model, setup.cluster, share, knobs);
        plan.training.seq_len = setup.training.seq_len;
        plan.training.global_batch = setup.training.global_batch;
        plan.context_parallel.degree = degree;
        const SimulationSummary simulated =
            analyze_step(setup.model, setup.cluster, setup.profile, plan, false).simulation.summary;
        const std::int64_t states_bytes =
            states_floor_bytes(setup.model, setup.cluster, setup.profile, share, knobs);
        MESSAGE("cp " << degree << ", " << knobs.label() << ": ring floor " << ring_floor_s << " s, share's "
                      << share_floor_s << " s, simulated " << simulated.step_time_s << " s");
        CHECK(ring_floor_s > share_floor_s);  // every ring step's attention, not one
        CHECK(ring_floor_s <= simulated.step_time_s * (1 + 1e-9));
        CHECK(ring_floor_s > 0.5 * simulated.step_time_s);
        CHECK(ring.activation_peak_bytes >= alone.activation_peak_bytes);
        CHECK(states_bytes + ring.activation_peak_bytes <= simulated.peak_memory_bytes);
      }
    }
  }
}

TEST_CASE("context-parallel search: settings proven away by their ring floors leave a faster CP plan") {
  // llama3.1-8b at 131,072 tokens on 16 H100s: cp 2's best plan (its share's best, restored) takes 75.7 s; at cp 8
  // the share's best plan (no checkpointing at TP 2, the fastest without the ring) restores slower than that, and
  // its setting's ring floor is above it too, so with it proven away the share's best at cp 8 is a plan that wins.
  const Setup setup;
  SearchOptions options;
  options.tensor_parallel_degrees = {1, 2, 4, 8};
  options.memory_headroom_fraction = 0.03;
  ContextParallelOutcome pinned_outcome, outcome;
  const SearchResult pinned =
      search_with_context_parallel(setup.model, setup.cluster, setup.profile, setup.training, options, 2,
                                   pinned_outcome);
  const SearchResult searched =
      search_with_context_parallel(setup.model, setup.cluster, setup.profile, setup.training, options, 0, outcome);
  REQUIRE(pinned.feasible);
  REQUIRE(searched.feasible);
  CHECK(outcome.searched == std::vector<int>{2, 4, 8});
  CHECK(outcome.degree == 8);
  CHECK(searched.best.plan.context_parallel.degree == 8);
  CHECK(searched.best.knobs.rfind("CP 8, ", 0) == 0);
  MESSAGE("cp 2 pinned: " << pinned.best.summary.step_time_s << " s; searched: cp " << outcome.degree << ", "
                          << searched.best.summary.step_time_s << " s (" << searched.best.knobs << ")");
  CHECK(searched.best.summary.step_time_s < pinned.best.summary.step_time_s);
  // The planned plan is what it says: simulated again with its ring, the same step.
  const SimulationSummary again =
      analyze_step(setup.model, setup.cluster, setup.profile, searched.best.plan, false).simulation.summary;
  CHECK(again.step_time_s == doctest::Approx(searched.best.summary.step_time_s).epsilon(1e-12));
}

TEST_CASE("a pinned context-parallel degree: where the share's best overflows with its ring, searched again") {
  // cp 4 pinned: the share's best plan (TP 4, hybrid_shard:2, AC 25 %) is over the cap once its ring's buffers are
  // added (Note [Fixed context parallel degree]); searched again under a cap that leaves that much room, a CP 4 plan
  // that fits is the answer (before: "no plan fits").
  const Setup setup;
  SearchOptions options;
  options.tensor_parallel_degrees = {1, 2, 4, 8};
  options.memory_headroom_fraction = 0.03;
  ContextParallelOutcome outcome;
  const SearchResult result =
      search_with_context_parallel(setup.model, setup.cluster, setup.profile, setup.training, options, 4, outcome);
  CHECK(outcome.pinned);
  CHECK(outcome.degree == 4);
  REQUIRE(result.feasible);
  CHECK(result.best.plan.context_parallel.degree == 4);
  CHECK(result.best.knobs.rfind("CP 4, ", 0) == 0);
  // The cap and headroom said are the user's, and the plan fits them simulated with its ring.
  CHECK(result.memory_cap_bytes == setup.cluster.gpu.memory_bytes);
  const SimulationSummary again =
      analyze_step(setup.model, setup.cluster, setup.profile, result.best.plan, false).simulation.summary;
  CHECK(again.step_time_s == doctest::Approx(result.best.summary.step_time_s).epsilon(1e-12));
  CHECK(fits_in_memory(again, result.usable_memory_bytes()));
  CHECK(result.usable_memory_bytes() ==
        MemoryHeadroom{setup.cluster.gpu.memory_bytes, 0.03}.usable_bytes());
}
