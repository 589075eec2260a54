// What the TP, pipeline and context-parallel tests share: the rank's unit shards of a reference buffer
// (rank_unit_shards), the gradient check (check_moments), every unit's AdamW moments against the single-process
// reference's, and the final parameters' check (check_parameters).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
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

// How check_parameters compares the final parameters (Note [Ill-conditioned first step] in
// test_tensor_parallel.cpp).
struct ParameterCheck {
  // Only elements with |g₀| ≥ 100ε (and padding, g₀ = 0): an element whose first gradient is below AdamW's ε moves
  // by its rounding, not by the gradient.
  bool well_conditioned = true;
  // Elements outside test_equivalence.cpp's elementwise 1e-5 allowed, as a share of the shard; negative: not checked.
  double mismatched_share = 0.001;
  // ‖Δp − Δp_ref‖/‖Δp_ref‖ allowed per shard (test_equivalence.cpp's 1e-5 unless a test measured why not).
  double movement = 1e-5;
  // Sanity bound on the share of a shard the well-conditioned filter leaves out (it depends on the reference alone).
  double left_out_share = 0.01;
};

// The final parameters of the rank's shards: by movement (‖Δp − Δp_ref‖/‖Δp_ref‖ ≤ 1e-5, test_equivalence.cpp's
// check: 1 for an optimizer that never stepped) and elementwise as `check` says; the differences are reported.
// Measured for the pipeline test: ‖Δp − Δp_ref‖/‖Δp_ref‖ ≤ 7.0e-6 per shard, and under Interleaved1F1B 2 of the
// well-conditioned elements of one block outside 1e-5 (worst 2.7e-5) after 3 steps — the gradient summed per
// micro-batch and over the stage's 2 ranks, not in the reference's one GEMM — while every step's moments stay within
// 1e-5 (check_moments), which is what shows the gradients equal. `shards` and `where` as check_moments takes them.
template <class Shards, class Where>
void check_parameters(Runner& runner, const Shards& shards, const ReferenceRun& reference,
                      const runtime::AdamWOptions& adamw, Where where, const ParameterCheck& check = {}) {
  const auto final_ref = shards.of(reference.final_params);
  const auto initial_ref = shards.of(reference.initial_params);
  const auto m0_ref = shards.of(reference.exp_avg[0]);  // (1 − β₁)·g₀
  const std::vector<FlatParam*> params = runner.flat_params();
  for (std::size_t unit = 0; unit < params.size(); ++unit) {
    FlatParam& param = *params[unit];
    const std::vector<float> mine(param.shard().begin(), param.shard().end());
    std::vector<float> moved_mine, moved_ref, kept_initial;
    std::size_t mismatches = 0, left_out = 0;
    double worst = 0;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const double g0 = std::abs(static_cast<double>(m0_ref[unit][i])) / (1 - adamw.beta1);
      if (check.well_conditioned && g0 > 0 && g0 < 100 * adamw.eps) {
        ++left_out;
        continue;
      }
      const double a = mine[i], b = final_ref[unit][i];
      if (!close(a, b, 1e-5, 0.1)) ++mismatches;  // test_equivalence.cpp's tolerance and floor
      worst = std::max(worst, std::abs(a - b) / std::max({std::abs(a), std::abs(b), 0.1}));
      moved_mine.push_back(mine[i]);
      moved_ref.push_back(final_ref[unit][i]);
      kept_initial.push_back(initial_ref[unit][i]);
    }
    const double moved = movement_distance(moved_mine, kept_initial, moved_ref);
    INFO(where(runner, param), ": worst relative parameter difference ", worst, ", ‖Δp − Δp_ref‖/‖Δp_ref‖ = ", moved,
         ", ", mismatches, " outside 1e-5, ", left_out, " of ", mine.size(), " elements left out");
    if (check.mismatched_share >= 0) {
      CHECK(static_cast<double>(mismatches) <= check.mismatched_share * static_cast<double>(mine.size()));
    }
    CHECK(moved <= check.movement);
    CHECK(static_cast<double>(left_out) <= check.left_out_share * static_cast<double>(mine.size()));
  }
}

// Note [Ill-conditioned first step] (test_tensor_parallel.cpp): a step's AdamW moments while step < compared_steps,
// and the parameters after the last compared step — against the reference's own run of that many steps
// (`reference_until(steps)`) where fewer than all `steps` are compared. `shards` and `where` as check_moments takes
// them.
template <class Shards, class Where, class ReferenceUntil>
void check_compared_step(Runner& runner, const Shards& shards, const ReferenceRun& reference, int step,
                         int compared_steps, int steps, ReferenceUntil reference_until,
                         const runtime::AdamWOptions& adamw, Where where, const ParameterCheck& check) {
  if (step < compared_steps) check_moments(runner, shards, reference, step, where);
  if (step + 1 != compared_steps) return;
  if (step + 1 == steps) {
    check_parameters(runner, shards, reference, adamw, where, check);
  } else {
    check_parameters(runner, shards, reference_until(step + 1), adamw, where, check);
  }
}

// The whole model gather_parameters assembles (from every shard, and TP rank or stage) cut back into this rank's
// shards equals the shards the caller just compared with the reference: so only its placement is tested here.
template <class Shards, class Where>
void check_gathered(Runner& runner, const Shards& shards, const ReferenceRun& reference, Where where) {
  const std::vector<float> whole = runner.gather_parameters();
  REQUIRE(whole.size() == reference.final_params.size());
  const auto gathered = shards.of(whole);
  const std::vector<FlatParam*> params = runner.flat_params();
  for (std::size_t unit = 0; unit < params.size(); ++unit) {
    INFO(where(runner, *params[unit]), ": gathered parameters differ from the shard");
    CHECK(std::equal(params[unit]->shard().begin(), params[unit]->shard().end(), gathered[unit].begin()));
  }
}

// "calls/expected calls bytes/expected B": a run's tally beside its program's, for messages.
inline std::string tallies(const comm::CollectiveTally& run, const comm::CollectiveTally& expected) {
  return std::to_string(run.calls) + "/" + std::to_string(expected.calls) + " calls " + std::to_string(run.bytes) +
         "/" + std::to_string(expected.bytes) + " B";
}

// What one step of `schedule` must run, read from the schedule the simulator times: its collective ops (FSDP's, over
// the DP group) plus the TP collectives each forward, recompute and backward op's kernels list over `tensor_parallel`
// ranks (Note [Tensor-parallel collectives] in costmodel/kernel_spec.h) — the runner counts what its kernels and
// groups actually call.
inline comm::CommCounters schedule_collectives(const StepSchedule& schedule, int tensor_parallel) {
  comm::CommCounters expected = Runner::expected_collectives(schedule);
  for (const Op& op : schedule.ops) {
    if (!op.kernels) continue;
    for (const ActivationCollectiveCall& call : op.kernels->collectives) {
      using enum ActivationCollective;
      const comm::Collective kind = call.kind == all_gather       ? comm::Collective::all_gather
                                    : call.kind == reduce_scatter ? comm::Collective::reduce_scatter
                                                                  : comm::Collective::all_reduce;
      CHECK(call.ranks == tensor_parallel);
      expected[kind].calls += 1;
      expected[kind].bytes += static_cast<std::uint64_t>(call.bytes);
    }
  }
  return expected;
}

// A step's collectives equal its program's, every kind's calls and bytes; returns them side by side, for a message.
inline std::string check_collectives(const comm::CommCounters& run, const comm::CommCounters& expected) {
  std::string counts;
  for (std::size_t kind = 0; kind < comm::kCollectiveKinds; ++kind) {
    INFO("collective ", comm::to_string(static_cast<comm::Collective>(kind)));
    CHECK(run.tallies[kind].calls == expected.tallies[kind].calls);
    CHECK(run.tallies[kind].bytes == expected.tallies[kind].bytes);
    counts += std::string(" ") + comm::to_string(static_cast<comm::Collective>(kind)) + " " +
              tallies(run.tallies[kind], expected.tallies[kind]);
  }
  return counts;
}

// A step's point-to-point messages equal its program's, sends and receives; returns them, for a message.
inline std::string check_p2p(const comm::P2pCounters& run, const comm::P2pCounters& expected) {
  CHECK(run.sends.calls == expected.sends.calls);
  CHECK(run.sends.bytes == expected.sends.bytes);
  CHECK(run.recvs.calls == expected.recvs.calls);
  CHECK(run.recvs.bytes == expected.recvs.bytes);
  return "send " + tallies(run.sends, expected.sends) + ", recv " + tallies(run.recvs, expected.recvs);
}

// The step's tracked memory is its program's (test_accounting.cpp's categories): every model-state category's peak
// exactly, activations within 2%, as test_accounting.cpp compares them; returns the activation peaks, for a message.
inline std::string check_tracked_memory(const StepReport& report, const StepSchedule& program) {
  const MemoryByCategory predicted = predicted_peaks(program);
  const auto activations = static_cast<std::size_t>(MemoryCategory::activations);
  CHECK(static_cast<double>(report.peak_by_category[activations]) ==
        doctest::Approx(static_cast<double>(predicted[activations])).epsilon(0.02));
  for (MemoryCategory category : {MemoryCategory::sharded_params, MemoryCategory::sharded_grads,
                                  MemoryCategory::optimizer_states, MemoryCategory::unsharded_params,
                                  MemoryCategory::root_unit, MemoryCategory::unsharded_grads,
                                  MemoryCategory::comm_buffers}) {
    const auto index = static_cast<std::size_t>(category);
    INFO("tracked ", to_string(category), " peak ", report.peak_by_category[index], " B, the program's ",
         predicted[index], " B");
    CHECK(report.peak_by_category[index] == predicted[index]);
  }
  return "tracked activation peak " + std::to_string(report.peak_by_category[activations]) + " B, the program's " +
         std::to_string(predicted[activations]) + " B";
}

}  // namespace shardplan::runner::testing
