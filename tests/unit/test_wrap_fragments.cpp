// Tests of the wrap searches' fragments: a wrapping timed from its fragments is the simulator's step on every
// partition and kept suffix where the fragments say exact (a lower bound elsewhere), and its memory floor never
// exceeds the simulated peak.
#include <doctest/doctest.h>

#include "wrap_cases.h"
#include "wrap_dp.h"

using namespace shardplan;
using namespace shardplan::testing;


// Also the memory floors every search uses (Note [Wrap floor]): the best-first search's, from each placement; the label
// DP's, the same for every state with the same busy streams; never above the simulated peak.
TEST_CASE("wrap fragments: a wrapping's fragments time the simulated step, exactly where they say so") {
  for (const WrapCase& c : wrap_cases()) {
    INFO(c.name());
    const WrapSetup setup = wrap_setup(c);
    WrapFragments fragments(setup.model, setup.base, setup.profile, setup.cluster.world_size(),
                            setup.cluster.gpus_per_node);
    int exact = 0, bounded = 0;
    double least_ratio = 1, least_floor_ratio = 1;
    for (const CaseWrapping& wrapping : case_wrappings(setup, 6, fragments.keep_choice())) {
      std::string lengths;
      for (const UnitChoice& unit : wrapping.units) lengths += std::to_string(unit.length) + (unit.kept ? "k " : " ");
      INFO("units: " << lengths);
      const Simulated sim = simulate_wrapping(setup, wrapping);
      const WrapEvaluation evaluation = evaluate_wrapping(fragments, wrapping.units);
      if (evaluation.exact) {
        ++exact;
        REQUIRE(evaluation.step_s == doctest::Approx(sim.step_s).epsilon(1e-9));
      } else {
        ++bounded;
        REQUIRE(evaluation.step_s <= sim.step_s * (1 + 1e-9));
        least_ratio = std::min(least_ratio, evaluation.step_s / sim.step_s);
      }
      REQUIRE(evaluation.floor_bytes <= sim.peak_bytes);
      const WrapEvaluation as_dp = evaluate_wrapping(fragments, wrapping.units, false);
      REQUIRE(as_dp.step_s == evaluation.step_s);
      REQUIRE(as_dp.floor_bytes <= evaluation.floor_bytes);
      least_floor_ratio = std::min(least_floor_ratio, static_cast<double>(as_dp.floor_bytes) /
                                                          static_cast<double>(sim.peak_bytes));
    }
    MESSAGE(c.name() << ": " << exact << " wrappings timed exactly, " << bounded << " bounded (at least "
                     << least_ratio << " of the simulated step); the DP's floor at least " << least_floor_ratio
                     << " of the peak");
    CHECK(least_floor_ratio >= 0.5);  // and not vacuous
  }
}
