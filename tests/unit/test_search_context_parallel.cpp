// Tests of the search over context parallelism (Note [Context-parallel search], [Context-parallel floors] in
// planner/search_context_parallel.cpp): the CP rank's floors below every CP plan's simulated step and peak, above the
// share's, the wrap fragments of the CP rank's program exact against the simulator, the degree search finding a
// faster plan once the settings that cannot win are proven away, and a pinned degree's search comparing CP plans,
// not its share's (Note [Fixed context parallel degree]).
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
#include "wrap_cases.h"
#include "wrap_dp.h"

using namespace shardplan;
using namespace shardplan::testing;

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

TEST_CASE("a pinned context-parallel degree: every plan simulated with its ring, no slower than a pinned knob's") {
  // `plan -m llama3.1-8b -c 2x8xH100-80GB --seq-len 131072 --context-parallel 4` (Note [Fixed context parallel
  // degree]): the search's plans are CP plans, so its incumbent is a CP
  // step. When only the share's best plan was given its ring, the answer (TP 4, hybrid_shard:2, AC 25 %, 21.29 s)
  // was slower than the same search with `--ac full` pinned (20.42 s): the share's best plans tripled with the ring
  // and AC full's share floor was above the share's incumbent. A knob left out is searched: the search with AC left
  // out is no slower than with it pinned.
  const Setup setup;
  SearchOptions options;
  options.tensor_parallel_degrees = {1, 2, 4, 8};
  options.memory_headroom_fraction = 0.03;
  // `plan --context-parallel 4`'s batch: one sequence per data-parallel rank, 16 / 4 of them.
  TrainingConfig training = setup.training;
  training.global_batch = 4;
  ContextParallelOutcome outcome, full_outcome;
  const SearchResult result =
      search_with_context_parallel(setup.model, setup.cluster, setup.profile, training, options, 4, outcome);
  TrainingConfig full_training = training;
  full_training.checkpointing = ActivationCheckpointing::full;
  SearchOptions full_options = options;
  full_options.pins.checkpointing = true;  // --ac full
  const SearchResult full =
      search_with_context_parallel(setup.model, setup.cluster, setup.profile, full_training, full_options, 4,
                                   full_outcome);
  CHECK(outcome.pinned);
  CHECK(outcome.degree == 4);
  REQUIRE(result.feasible);
  REQUIRE(full.feasible);
  MESSAGE("cp 4, AC searched: " << result.best.summary.step_time_s << " s (" << result.best.knobs
                                << "); AC full pinned: " << full.best.summary.step_time_s << " s ("
                                << full.best.knobs << ")");
  CHECK(result.best.summary.step_time_s <= full.best.summary.step_time_s);
  CHECK(result.best.summary.step_time_s < 20.0);  // 21.29 s when the ring was added after the search
  CHECK(result.best.plan.context_parallel.degree == 4);
  CHECK(result.best.knobs.rfind("CP 4, ", 0) == 0);
  // The cap and headroom said are the user's, and the plan fits them simulated with its ring: the step and peak
  // printed are the CP plan's, whichever tensor-parallel view the search simulated it in.
  CHECK(result.memory_cap_bytes == setup.cluster.gpu.memory_bytes);
  const SimulationSummary again =
      analyze_step(setup.model, setup.cluster, setup.profile, result.best.plan, false).simulation.summary;
  CHECK(again.step_time_s == doctest::Approx(result.best.summary.step_time_s).epsilon(1e-12));
  CHECK(again.peak_memory_bytes == result.best.summary.peak_memory_bytes);
  CHECK(fits_in_memory(again, result.usable_memory_bytes()));
  CHECK(result.usable_memory_bytes() ==
        MemoryHeadroom{setup.cluster.gpu.memory_bytes, 0.03}.usable_bytes());
}

// Note [Fixed context parallel degree]: a search at a degree lowers its wrap fragments from the CP rank's program
// (the share's plan given its degree back), so the ring's attention steps, its sends on the p2p stream and their
// buffers are in every fragment: the fragments' step is the simulator's for every partition (or a lower bound where
// the fragments say so), and their memory floor is below the simulated peak. Mutation tried: fragments lowered from
// the share's plan (without the ring) fail the step checks here (the share's step is about half the CP plan's).
TEST_CASE("context-parallel wrap fragments: the CP rank's program, the simulator's step over every partition") {
  for (const char* strategy : {"full_shard", "shard_grad_op"}) {
    for (const ActivationCheckpointing ac : {ActivationCheckpointing::none, ActivationCheckpointing::full}) {
      const WrapCase c{"llama2-7b-10", "8xH100-80GB", strategy, ac, 4096};
      INFO(c.name());
      WrapSetup setup = wrap_setup(c);
      const int degree = 2;
      // As Searcher::search_setting builds its base: the share's plan (4 sequences over 4 data-parallel ranks, as
      // 8 shares over 8), then the degree and the whole sequence back.
      TrainingConfig training = setup.base.training;
      training.global_batch = 4;
      const TrainingConfig share = context_parallel_share_training(training, degree);
      setup.base = context_parallel_plan_of_share(
          default_plan(setup.model, share, parse_strategy(strategy), wrap_per_block(setup.model),
                       setup.cluster.world_size()),
          degree);
      REQUIRE(setup.base.context_parallel.degree == degree);
      REQUIRE(setup.base.training.seq_len == 4096);
      WrapFragments fragments(setup.model, setup.base, setup.profile, setup.cluster.world_size(),
                              setup.cluster.gpus_per_node);
      int partitions = 0, exact = 0;
      double worst_gap = 0;
      for (const CaseWrapping& wrapping : case_wrappings(setup, 4, false)) {
        CaseWrapping as_template = wrapping;
        for (UnitChoice& unit : as_template.units) unit.kept = fragments.template_kept();
        const WrapEvaluation evaluation = evaluate_wrapping(fragments, as_template.units);
        const Simulated simulated = simulate_wrapping(setup, as_template);
        ++partitions;
        if (evaluation.exact) {
          ++exact;
          CHECK(evaluation.step_s == doctest::Approx(simulated.step_s).epsilon(1e-9));
        } else {
          CHECK(evaluation.step_s <= simulated.step_s * (1 + 1e-9));
        }
        worst_gap = std::max(worst_gap, 1 - evaluation.step_s / simulated.step_s);
        CHECK(evaluation.floor_bytes <= simulated.peak_bytes);
      }
      MESSAGE(c.name() << " cp " << degree << ": " << partitions << " partitions, " << exact
                       << " exact; the fragments' step at most " << 100 * worst_gap << " % under the simulator's");
      CHECK(exact > 0);
    }
  }
}
