// Tensor parallelism × FSDP on a 2-D mesh (TP 2 inner, FSDP over the DP group) trains like the single-process
// reference: losses, AdamW's moments (the reduced gradients), final parameters, and the collectives per step equal
// the schedule's: its FSDP collective ops plus the TP collectives its passes' kernels list (the cost model's); the
// tracked memory its bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "case_skip.h"
#include "model_presets.h"
#include "mpi_communicator.h"
#include "runner.h"
#include "moment_check.h"
#include "runner_fixtures.h"
#include "tensor_parallel_model.h"

namespace shardplan::runner::testing {

namespace {

constexpr int kTensorParallel = 2;

struct TensorParallelCase {
  ModelSpec model;
  std::string strategy = "full_shard";
  std::int64_t sequences_per_rank = 0;  // global batch per DP rank; 0: one micro-batch per DP rank
  ActivationCheckpointing ac = ActivationCheckpointing::none;
  // How check_parameters (moment_check.h) compares the final parameters (Note [Ill-conditioned first step]): by
  // default test_equivalence.cpp's elementwise check of every element.
  ParameterCheck parameters{false, 0.0};
  // Steps whose AdamW moments are compared, and after the last of which the parameters are (Note [Ill-conditioned
  // first step]); losses and collective counts are compared at every step.
  int compared_steps = 3;
};

// This rank's shard of every unit, cut from a whole-model buffer of the reference: its TP rank's slice (Note
// [Tensor-parallel split]), then the unit's FSDP shard of it (Note [FlatParam layout]) — both written from the layout
// definitions by the fixtures and tensor_parallel_model.h, not by the runner's own init or gather.
struct ReferenceShards {
  const runtime::ModelLayout whole;
  Runner& runner;

  std::vector<std::vector<float>> of(const std::vector<float>& whole_flat) const {
    const runtime::ModelLayout& mine = runner.model_layout();
    std::vector<float> slice(static_cast<std::size_t>(mine.element_count));
    runtime::extract_tensor_parallel_rank(whole, mine, runner.tensor_parallel_degree(), runner.tensor_parallel_rank(),
                                          whole_flat, slice);
    return rank_unit_shards(runner, slice);
  }
};

std::string where(Runner& runner, FlatParam& param) {
  return "TP rank " + std::to_string(runner.tensor_parallel_rank()) + ", unit '" + param.sizes().name + "' shard " +
         std::to_string(param.shard_index());
}

// Note [Ill-conditioned first step]: AdamW's first update is lr·g/(|g| + ε) (m̂ = g, √v̂ = |g|), whose derivative
// lr·ε/(|g| + ε)² is lr/(4ε) = 2.5e4 (lr 1e-3, ε 1e-8) where |g| ≈ ε: there a gradient difference at fp32 rounding level
// (two correct runs summing in other orders — the reference's one GEMM, FSDP's sum over ranks, TP's partial sums over
// heads and FFN slices) moves the parameter visibly, and later steps amplify small √v̂ likewise. tiny-llama (0.8 M
// parameters) has such elements: measured, pure FSDP on 4 ranks (this test with TP 1) already leaves 8 parameters
// outside test_equivalence.cpp's elementwise 1e-5 (worst 6.3e-5), TP 2 × FSDP 2 leaves 32 (worst 4.9e-4), each with a
// step-0 gradient |g₀| < 5ε, and ‖Δp − Δp_ref‖/‖Δp_ref‖ = 3.1e-5 over the whole model. So on tiny-llama the
// parameters are checked with the movement check per shard over the elements whose reference step-0 gradient is at
// least 100ε (there the derivative is ≤ lr/(10⁴ε) = 10), and the elementwise check runs on small-llama, which meets
// it for every element as test_equivalence.cpp requires. Which elements are left out depends on the reference alone,
// so a wrong TP gradient cannot hide there; their gradients are compared with all others in check_moments.
// With the vocabulary-parallel embedding and loss-parallel head (Note [Vocabulary-parallel layers]), whose input
// gradient is a sum of V/t-column partial products, the step-0 gradients still agree to 3.4e-7..5.6e-7 (‖m − m_ref‖ /
// ‖m_ref‖ per shard), but the left-out elements' first moves then carry into every gradient of step 1: measured,
// ‖m − m_ref‖/‖m_ref‖ 1.2e-5..3.6e-5 at steps 1 and 2 and the final movement check 1.4e-5..4.8e-5 per shard, in
// every unit — also with loss parallel's sum of exponentials exchanged to double precision, so not that sum's fp32
// rounding. So tiny-llama compares the moments and the parameters after its first step (3 steps of losses and
// collective counts), and small-llama every element after 3 steps.
void check_tensor_parallel(const TensorParallelCase& c) {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  if (size % kTensorParallel != 0 || size < 2 * kTensorParallel) {
    SKIP_CASE("TP " + std::to_string(kTensorParallel) + " × FSDP needs a multiple of " +
              std::to_string(2 * kTensorParallel) + " ranks, got " + std::to_string(size) + " (runs at 4)");
  }
  const int data_parallel = size / kTensorParallel;
  const int micro_batch = 2, seq_len = 16, steps = 3;
  const std::int64_t global = c.sequences_per_rank > 0 ? c.sequences_per_rank * data_parallel : 0;
  const TrainingConfig training = fp32_training(seq_len, micro_batch, global, c.ac);
  // FSDP over `data_parallel` ranks of each TP rank's parameters (Note [2-D mesh]).
  Plan plan = strategy_plan(c.model, training, c.strategy, data_parallel);
  plan.tensor_parallel_degree = kTensorParallel;
  RunnerOptions options;
  options.seed = 11;
  Runner runner(c.model, plan, world, options);
  const int k = runner.schedule().micro_batches;
  const auto data = test_data(micro_batch, seq_len);
  const ReferenceRun reference =
      reference_training(c.model, data, steps, k, data_parallel, options.seed, options.adamw);
  const ReferenceShards reference_shards{runtime::model_layout(c.model), runner};
  // The ranks of one TP group train on the same micro-batches: those of their DP rank (TP inner).
  const int data_parallel_rank = world.rank() / kTensorParallel;
  const StepSchedule& schedule = runner.schedule();
  REQUIRE(schedule.parallel.tp() == kTensorParallel);
  const std::uint64_t fsdp_all_gathers = Runner::expected_collectives(schedule).calls(comm::Collective::all_gather);
  const comm::CommCounters expected = schedule_collectives(schedule, kTensorParallel);
  CHECK(expected.calls(comm::Collective::all_gather) > fsdp_all_gathers);  // the TP ones are in it
  const comm::CommCounters runner_expected = runner.expected_step_collectives();
  for (std::size_t kind = 0; kind < comm::kCollectiveKinds; ++kind) {
    CHECK(runner_expected.tallies[kind].calls == expected.tallies[kind].calls);
  }

  for (int step = 0; step < steps; ++step) {
    const auto batches = rank_micro_batches(data, step, k, data_parallel, data_parallel_rank);
    const StepReport report = runner.step(batches);
    const double reference_loss = reference.losses[static_cast<std::size_t>(step)];
    INFO(c.model.name, ", ", c.strategy, ", step ", step, ": loss ", report.loss, " vs reference ", reference_loss);
    CHECK(close(report.loss, reference_loss, 1e-5));
    const auto reference_until = [&](int until) {
      return reference_training(c.model, data, until, k, data_parallel, options.seed, options.adamw);
    };
    check_compared_step(runner, reference_shards, reference, step, c.compared_steps, steps, reference_until,
                        options.adamw, where, c.parameters);
    // Each rank's tracked memory is the schedule's (its TP slice's units over the DP group; the sequence-parallel
    // blocks' and the loss-parallel head's activations as the cost model counts torch's).
    const std::string counts = check_collectives(report.collectives, expected) + "; " +
                               check_tracked_memory(report, schedule);
    if (world.rank() == 0) {
      MESSAGE(c.model.name, " ", c.strategy, " step ", step, ": loss ", report.loss, " vs reference ", reference_loss,
              "; run/schedule:", counts);
    }
  }
  check_gathered(runner, reference_shards, reference, where);
}

}  // namespace

// The must-show case of issue 18: mpirun -np 4, TP 2 × FSDP 2 (full_shard) on tiny-llama.
// Mutations tried (each rebuilt and run on this case; every one fails it):
// - loss parallel's sum of exponentials also exchanged as a second fp32 word (an all-reduce the schedule does not
//   list): the all-reduce calls and bytes differ from the schedule's at every step;
// - (before vocabulary parallelism) ReplicatedGradients::sum_over without its all-reduce: losses off from step 1
//   (5.46943 vs 5.47304), m and v off in every unit; the loss share's gradient not divided by tp: m and v fail in
//   every unit from step 0; extract_tensor_parallel_rank giving every TP rank the first rows of the column-parallel
//   weights: losses off from step 0 (5.6225 vs 5.64419).
TEST_CASE("runner: tensor_parallel 2 × full_shard 2 trains tiny-llama like the reference") {
  check_tensor_parallel({tiny_llama(), "full_shard", 0, ActivationCheckpointing::none, {true, -1}, 1});
}

// small-llama, test_equivalence.cpp's model: every parameter within its elementwise tolerance (Note [Ill-conditioned
// first step]).
TEST_CASE("runner: tensor_parallel 2 × full_shard 2 trains small-llama like the reference") {
  check_tensor_parallel({small_llama()});
}

TEST_CASE("runner: tensor_parallel 2 × shard_grad_op 2 with accumulation and full checkpointing") {
  check_tensor_parallel({small_llama(), "shard_grad_op", 4, ActivationCheckpointing::full});
}

TEST_CASE("runner: tensor_parallel 2 × no_shard 2") { check_tensor_parallel({small_llama(), "no_shard"}); }

}  // namespace shardplan::runner::testing
