// The closed-form bound (memory_bound.h) against the simulated peak over the wrap tests' cases: never below it in any
// term, equal in model states; and how tight it is.
#include <doctest/doctest.h>

#include <algorithm>

#include "memory_bound.h"
#include "memory_fixtures.h"
#include "unit_layout.h"
#include "wrap_cases.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

// How each wrapping's plan is varied: FSDP's one-ahead prefetch as plan_with_units sets it, two ahead (with FSDP1's
// limit of two gathers, and unlimited), the limiter at one, a resharded root, an out-of-order prefetch, a backward
// prefetch of a unit that already ran, and reshard_after_forward to half the shard group.
enum class Variant {
  one_ahead, two_ahead, two_ahead_unlimited, limit_one, root_resharded, out_of_order, backward_looking, partial_copy
};
constexpr Variant kVariants[] = {Variant::one_ahead,      Variant::two_ahead,    Variant::two_ahead_unlimited,
                                 Variant::limit_one,      Variant::root_resharded, Variant::out_of_order,
                                 Variant::backward_looking, Variant::partial_copy};

const char* name_of(Variant variant) {
  switch (variant) {
    case Variant::one_ahead: return "one ahead";
    case Variant::two_ahead: return "two ahead";
    case Variant::two_ahead_unlimited: return "two ahead, no limiter";
    case Variant::limit_one: return "limiter at one";
    case Variant::root_resharded: return "root resharded";
    case Variant::out_of_order: return "out of order";
    case Variant::backward_looking: return "backward-looking";
    case Variant::partial_copy: return "partial copy";
  }
  return "";
}

// The variant's plan, or false when it does not apply to this one.
bool vary(Plan& plan, Variant variant, int world_size, int gpus_per_node) {
  const std::size_t count = plan.units.size();
  switch (variant) {
    case Variant::one_ahead: return true;
    case Variant::two_ahead: prefetch_two_ahead(plan); return true;
    case Variant::two_ahead_unlimited:
      prefetch_two_ahead(plan);
      plan.max_inflight_all_gathers = 0;
      return true;
    case Variant::limit_one: plan.max_inflight_all_gathers = 1; return true;
    case Variant::root_resharded: plan.units[0].reshard_after_forward.enabled = true; return true;
    case Variant::out_of_order:  // the root asks for the second unit before the first unit asks for it
      if (count < 4) return false;
      plan.units[0].forward_prefetch = {1, 3};
      plan.units[count - 1].backward_prefetch = {static_cast<int>(count) - 3};
      return true;
    case Variant::backward_looking:  // the first unit, last in backward, asks for the last one again
      if (count < 3) return false;
      plan.units[1].backward_prefetch = {static_cast<int>(count) - 1};
      return true;
    case Variant::partial_copy: {
      const int group = resolve_sharding(plan.units[1].strategy, world_size, gpus_per_node).param_group;
      if (group < 4 || group % 2 != 0) return false;
      for (std::size_t id = 1; id < count; ++id) plan.units[id].reshard_after_forward.group_size = group / 2;
      return true;
    }
  }
  return false;
}

// What FSDP2 holds of full-size gradients at most: the root's and two others (post_backward waits for the previous
// reduce-scatter), or every unit's with no_sync accumulation.
std::int64_t fsdp_gradient_bytes(const std::vector<UnitLayout>& layouts) {
  std::vector<std::int64_t> others;
  for (std::size_t unit = 1; unit < layouts.size(); ++unit) {
    others.push_back(layouts[unit].grad_copies ? layouts[unit].grad_copy_bytes : 0);
  }
  std::sort(others.rbegin(), others.rend());
  std::int64_t total = layouts[0].grad_copies ? layouts[0].grad_copy_bytes : 0;
  for (std::size_t i = 0; i < std::min<std::size_t>(2, others.size()); ++i) total += others[i];
  return total;
}

}  // namespace

// Every partition of each case's blocks (at most 500 wrappings a case, spread over its list; all 1,409,451 plans of the
// full lists pass too, in 85 s) under every variant.
// Mutation tried: pass_in_flight charging the limit − 1 largest counted copies instead of the limit largest (one fewer
// prefetched unit) fails 1089 term checks, the first on the first case; the total hides it (the gradient term's slack)
// until the no_sync case, where every gradient is alive:
//   test_memory_bound.cpp:139: ERROR: CHECK( bound_terms[term].second >= peak_terms[term].second ) is NOT correct!
//     values: CHECK( 2428600320 >= 4047667200 )
//     logged: llama2-7b-10 on 8xH100-80GB full_shard seq 4096
//             units: 4 6 , one ahead
//             term unsharded_params
//   test_memory_bound.cpp:143: FATAL ERROR: REQUIRE( bound.total_bytes() >= simulated.summary.peak_memory_bytes ) is
//   NOT correct!
//     values: REQUIRE( 20927954944 >= 21288714240 )
//     logged: llama2-7b-10 on 8xH100-80GB full_shard seq 4096 accumulation 2 no_sync
//             units: 4 6 , one ahead
TEST_CASE("memory bound: at or above the simulated peak in every term, equal in model states, over the wrap cases") {
  std::vector<double> ratios;
  int plans = 0, fallbacks_checked = 0, beyond_fsdp = 0, gradient_checked = 0;
  for (const WrapCase& c : wrap_cases()) {
    INFO(c.name());
    const WrapSetup setup = wrap_setup(c);
    const int world = setup.cluster.world_size(), gpus = setup.cluster.gpus_per_node;
    const bool kept_choice = setup.base.units.size() > 1 && setup.base.units[1].reshard_after_forward.enabled;
    const std::vector<CaseWrapping> wrappings = case_wrappings(setup, 6, kept_choice);
    const std::size_t stride = std::max<std::size_t>(1, wrappings.size() / 500);
    for (std::size_t index = 0; index < wrappings.size(); index += stride) {
      const CaseWrapping& wrapping = wrappings[index];
      std::string lengths;
      for (const UnitChoice& unit : wrapping.units) lengths += std::to_string(unit.length) + (unit.kept ? "k " : " ");
      for (const Variant variant : kVariants) {
        Plan plan = plan_with_units(setup.model, setup.base, wrapping.ranges(setup.base.units[1].layers.begin),
                                    wrapping.kept());
        if (!vary(plan, variant, world, gpus)) continue;
        INFO("units: " << lengths << ", " << std::string(name_of(variant)));
        LoweringOptions options;
        options.world_size = world;
        options.gpus_per_node = gpus;
        options.context_overhead_bytes = setup.profile.context_overhead_bytes;
        const SimulationResult simulated = simulate(lower_plan(plan, setup.model, options), setup.profile, false);
        const MemoryBreakdown peak = breakdown_from_categories(simulated.summary.memory_at_peak, 0);
        const MemoryBreakdown bound =
            memory_upper_bound(plan, setup.model, world, gpus, setup.profile.context_overhead_bytes);
        const auto bound_terms = bound.terms();
        const auto peak_terms = peak.terms();
        for (std::size_t term = 0; term < bound_terms.size(); ++term) {
          INFO("term " << bound_terms[term].first);
          CHECK(bound_terms[term].second >= peak_terms[term].second);
        }
        CHECK(bound.model_states_bytes() == peak.model_states_bytes());
        CHECK(bound.overhead_bytes == peak.overhead_bytes);
        REQUIRE(bound.total_bytes() >= simulated.summary.peak_memory_bytes);
        ++plans;
        fallbacks_checked += variant == Variant::backward_looking ? 1 : 0;
        if (variant == Variant::one_ahead) {
          ratios.push_back(static_cast<double>(bound.total_bytes()) /
                           static_cast<double>(simulated.summary.peak_memory_bytes));
          if (!(c.no_sync && c.micro_batches > 1)) {
            ++gradient_checked;
            const auto layouts = unit_layouts(plan, setup.model, world, gpus);
            if (peak.unsharded_grads_bytes > fsdp_gradient_bytes(layouts)) ++beyond_fsdp;
          }
        }
      }
    }
  }
  REQUIRE(!ratios.empty());
  CHECK(fallbacks_checked > 0);
  std::sort(ratios.begin(), ratios.end());
  MESSAGE(plans << " plans; bound / simulated peak over the one-ahead plans (" << ratios.size()
                << "): median " << ratios[ratios.size() / 2] << ", worst " << ratios.back() << ", best "
                << ratios.front());
  MESSAGE("one-ahead plans whose simulated peak holds more full-size gradients than FSDP2's root + two: "
          << beyond_fsdp << " of " << gradient_checked);
}
