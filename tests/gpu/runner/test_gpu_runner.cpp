// The GPU runner on real devices: training equals the single-process CPU reference (fp32 within cuBLAS's reordered
// sums, bf16-mixed-fp32-reduce within bf16 rounding, parameters moved as far as the reference's), and its
// collectives, tracked memory and timeline match the schedule. Runs under mpirun with one GPU per rank
// (tests/gpu/nccl/main.cpp skips without one); tests/gpu/runner/meson.build runs each case sharded over 2 ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu_runner.h"
#include "mpi_communicator.h"
#include "nccl_communicator.h"
#include "runner_fixtures.h"

namespace shardplan::gpu {

using runner::testing::close;
using runner::testing::movement_distance;
using runner::testing::fp32_training;
using runner::testing::reference_training;
using runner::testing::small_llama;
using runner::testing::strategy_plan;
using runner::testing::test_data;

namespace {

struct Case {
  std::string strategy;
  std::string precision = "fp32";
  std::int64_t global_batch = 0;  // per rank; 0: one micro-batch per rank
  ActivationCheckpointing ac = ActivationCheckpointing::none;
  double loss_tolerance = 1e-4;
  double param_tolerance = 1e-4;
  double movement_tolerance = 1e-3;
  double adamw_eps = 1e-8;
};

// fp32: cuBLAS sums in another order than Eigen, so results agree to a few fp32 ulps per operation, not bitwise;
// 1e-4 relative leaves two orders of magnitude over what 3 steps of this model accumulate. bf16: operands carry 8
// significand bits (relative rounding 2^-9 ≈ 2e-3 per operand), so losses agree to ~1e-2 — but 3 steps move the
// reference's loss by only ~0.02 of 5.5, so no loss tolerance that bf16 passes can tell a run whose optimizer never
// steps. The decisive check is how far the parameters moved (Note [Movement tolerance]).
//
// Note [Movement tolerance]: the fp32 master parameters move by AdamW's update, lr·m̂/(√v̂ + ε) per step: at step 1
// exactly lr·sign(g) for every element with |g| ≫ ε, later a ratio of moments. bf16 gradients differ from the fp32
// reference by a relative δ of a few 2^-9 per GEMM, accumulated over the two blocks: δ ≈ 1e-2 (the chain-bf16 model
// test allows 3e-2). That changes the moment ratio by ~δ, and flips the sign of the step-1 update of the elements
// whose |g| is below δ·|g|typical — about 0.8·δ of them for gradients spread like a Gaussian around 0 — each by 2·lr
// against a total movement of ~3·lr per element. So ‖Δp − Δp_ref‖/‖Δp_ref‖ ≈ √(δ² + 0.8δ·4/9) ≈ 0.07 at δ = 1e-2.
// On the CPU, the fp32 runtime fed bf16-rounded parameters (and bf16-rounded gradients) scores 0.026 at 1 rank and
// 0.031 at 2 (the GPU also keeps bf16 activations, so expect more). 0.3 leaves 4× the estimate and 10× the
// emulation, while an optimizer that never steps scores exactly 1 and one stepping at half the rate 0.5.
// Unverified on a GPU (no device in the session that wrote it). The CPU runner's equivalence test applies the same
// check at 1e-5; given learning rate 0 it fails there with distance 1, while its losses drift only 0.4% and 1% from
// the reference's by steps 1 and 2 — inside this case's 2e-2 loss tolerance (tests/mpi_runner/test_equivalence.cpp).
void check_against_reference(const Case& c) {
  comm::MpiCommunicator control(MPI_COMM_WORLD);
  NcclCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  const ModelSpec model = small_llama();
  const int micro_batch = 2, seq_len = 16, steps = 3;
  const std::int64_t global = c.global_batch > 0 ? c.global_batch * size : 0;
  TrainingConfig training = fp32_training(seq_len, micro_batch, global, c.ac);
  training.precision = precision_recipe(c.precision);
  const Plan plan = strategy_plan(model, training, c.strategy, size);
  GpuRunnerOptions options;
  options.seed = 11;
  options.adamw.eps = c.adamw_eps;
  GpuRunner runner(model, plan, world, control, options);
  const auto data = test_data(micro_batch, seq_len);
  const int k = runner.schedule().micro_batches;
  const auto reference = reference_training(model, data, steps, k, size, options.seed, options.adamw);
  const std::string label = c.strategy + " " + c.precision + ", eps " + std::to_string(c.adamw_eps) + ", world " +
                            std::to_string(size);
  for (int step = 0; step < steps; ++step) {
    const runner::StepReport report = runner.step(runner::rank_micro_batches(data, step, k, size, world.rank()));
    INFO(label, ", step ", step, ": loss ", report.loss, " vs reference ",
         reference.losses[static_cast<std::size_t>(step)]);
    CHECK(std::isfinite(report.loss));
    CHECK(close(report.loss, reference.losses[static_cast<std::size_t>(step)], c.loss_tolerance));
  }
  const std::vector<float> params = runner.gather_parameters();
  REQUIRE(params.size() == reference.final_params.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!close(params[i], reference.final_params[i], c.param_tolerance, 1e-3)) ++mismatches;
  }
  INFO(label, ": ", mismatches, " of ", params.size(), " parameters differ beyond ", c.param_tolerance);
  CHECK(mismatches == 0);
  const double moved = movement_distance(params, reference.initial_params, reference.final_params);
  INFO(label, ": ‖Δp − Δp_ref‖/‖Δp_ref‖ = ", moved, " (1 when the optimizer never steps)");
  CHECK(moved <= c.movement_tolerance);
}

MemoryByCategory predicted_peaks(const StepSchedule& schedule) {
  MemoryByCategory current = schedule.persistent;
  MemoryByCategory peak = current;
  for (const Op& op : schedule.ops) {
    for (const auto& change : op.frees_at_start) current[static_cast<std::size_t>(change.category)] -= change.bytes;
    for (const auto& change : op.allocates) current[static_cast<std::size_t>(change.category)] += change.bytes;
    for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) peak[i] = std::max(peak[i], current[i]);
    for (const auto& change : op.frees) current[static_cast<std::size_t>(change.category)] -= change.bytes;
  }
  return peak;
}

}  // namespace

TEST_CASE("gpu runner: fp32 full_shard equals the CPU reference") {
  check_against_reference({"full_shard"});
  // With ε = 1 ≫ √v̂ AdamW's update is lr·m̂, linear in the gradient, so the parameters also show a gradient reduced
  // at the wrong scale (a sum instead of the mean over ranks), which the usual ε hides (Note [Gradient check] in
  // tests/mpi_runner/test_equivalence.cpp).
  Case linear{"full_shard"};
  linear.adamw_eps = 1.0;
  check_against_reference(linear);
}

TEST_CASE("gpu runner: fp32 shard_grad_op and no_shard equal the CPU reference") {
  check_against_reference({"shard_grad_op"});
  check_against_reference({"no_shard"});
}

TEST_CASE("gpu runner: gradient accumulation and activation checkpointing equal the CPU reference") {
  check_against_reference({"full_shard", "fp32", 3, ActivationCheckpointing::full});
  check_against_reference({"full_shard", "fp32", 2, ActivationCheckpointing::selective});
}

TEST_CASE("gpu runner: bf16-mixed-fp32-reduce tracks the CPU reference within bf16 rounding") {
  check_against_reference({"full_shard", "bf16-mixed-fp32-reduce", 0, ActivationCheckpointing::none, 2e-2, 5e-2, 0.3});
}

TEST_CASE("gpu runner: collectives, tracked memory and timeline match the schedule") {
  for (const char* precision : {"fp32", "bf16-mixed-fp32-reduce"}) {
    CAPTURE(precision);
    comm::MpiCommunicator control(MPI_COMM_WORLD);
    NcclCommunicator world(MPI_COMM_WORLD);
    const ModelSpec model = small_llama();
    TrainingConfig training = fp32_training(16, 2);
    training.precision = precision_recipe(precision);
    const Plan plan = strategy_plan(model, training, "full_shard", world.size());
    GpuRunner runner(model, plan, world, control);
    const auto data = test_data(2, 16);
    runner.step(runner::rank_micro_batches(data, 0, 1, world.size(), world.rank()));  // warm-up
    const runner::StepReport report = runner.step(runner::rank_micro_batches(data, 1, 1, world.size(), world.rank()));
    const comm::CommCounters expected = runner::Runner::expected_collectives(runner.schedule());
    for (comm::Collective kind : {comm::Collective::all_gather, comm::Collective::reduce_scatter,
                                  comm::Collective::all_reduce}) {
      CAPTURE(comm::to_string(kind));
      CHECK(report.collectives.calls(kind) == expected.calls(kind));
      CHECK(report.collectives.bytes(kind) == expected.bytes(kind));
    }
    const MemoryByCategory predicted = predicted_peaks(runner.schedule());
    for (MemoryCategory category : {MemoryCategory::sharded_params, MemoryCategory::sharded_grads,
                                    MemoryCategory::optimizer_states, MemoryCategory::unsharded_params,
                                    MemoryCategory::root_unit, MemoryCategory::comm_buffers}) {
      INFO(to_string(category));
      CHECK(report.peak_by_category[static_cast<std::size_t>(category)] ==
            predicted[static_cast<std::size_t>(category)]);
    }
    CHECK(report.allocator_peak_bytes > 0);
    REQUIRE(report.timeline.events.size() == runner.schedule().ops.size());
    for (const TimelineEvent& event : report.timeline.events) {
      CHECK(event.start_s >= 0.0);
      CHECK(event.end_s >= event.start_s);
    }
    CHECK(report.step_time_s > 0.0);
    CHECK(std::is_sorted(report.timeline.memory.begin(), report.timeline.memory.end(),
                         [](const MemorySample& a, const MemorySample& b) { return a.time_s < b.time_s; }));
  }
}

}  // namespace shardplan::gpu
