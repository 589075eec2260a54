// What the TP and pipeline tests share: the rank's unit shards of a reference buffer (rank_unit_shards) and the
// gradient check (check_moments), every unit's AdamW moments against the single-process reference's.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runner.h"
#include "runner_fixtures.h"

namespace shardplan::runner::testing {

// This rank's shard of every unit, cut from `rank_flat` — a whole-model buffer already cut to this rank's model (its
// TP slice, its pipeline stages) — by each unit's FSDP layout (unit_slice, from the layout definitions).
inline std::vector<std::vector<float>> rank_unit_shards(Runner& runner, const std::vector<float>& rank_flat) {
  std::vector<std::vector<float>> shards;
  for (FlatParam* param : runner.flat_params()) {
    const std::int64_t first = static_cast<std::int64_t>(param->shard_index()) * param->sizes().shard_elements;
    shards.push_back(unit_slice(runner.model_layout(), param->unit_layout(), rank_flat, first, param->shard().size()));
  }
  return shards;
}

// Note [Gradient check] (test_equivalence.cpp): AdamW's update is blind to a common gradient scale, its moments are
// not — a run that forgot the 1/tp of its loss share, lost a micro-batch's gradient or summed a replicated gradient
// twice trains to nearly the same parameters. `shards.of(whole_flat)` cuts a whole-model buffer into this rank's unit
// shards; `where(runner, param)` names a shard in the messages.
template <class Shards, class Where>
void check_moments(Runner& runner, const Shards& shards, const ReferenceRun& reference, int step, Where where) {
  const auto s = static_cast<std::size_t>(step);
  const auto m_ref = shards.of(reference.exp_avg[s]);
  const auto v_ref = shards.of(reference.exp_avg_sq[s]);
  const std::vector<FlatParam*> params = runner.flat_params();
  for (std::size_t unit = 0; unit < params.size(); ++unit) {
    FlatParam& param = *params[unit];
    const std::vector<float> m(param.exp_avg().begin(), param.exp_avg().end());
    const std::vector<float> v(param.exp_avg_sq().begin(), param.exp_avg_sq().end());
    const double m_distance = relative_distance(m, m_ref[unit]);
    const double v_distance = relative_distance(v, v_ref[unit]);
    INFO("step ", step, ", ", where(runner, param), ": ‖m − m_ref‖/‖m_ref‖ = ", m_distance,
         ", ‖v − v_ref‖/‖v_ref‖ = ", v_distance);
    CHECK(m_distance <= 1e-5);  // test_equivalence.cpp's tolerance
    CHECK(v_distance <= 1e-5);
  }
}

}  // namespace shardplan::runner::testing
