// Context parallelism × FSDP (CP 2 inner, FSDP over dp_shard 2 × cp 2), and with tensor parallelism beside it (CP 2 ×
// TP 2 inner), trains like the single-process reference: each rank's share of the sequences is torch's
// load-balanced chunks, losses, AdamW's moments (the reduced gradients) and final parameters equal the reference's,
// and per step the ring's messages equal the rank's program's send ops, the collectives its collective ops (and its
// passes' TP collectives) and the tracked memory its bytes.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "case_skip.h"
#include "context_parallel_runner.h"
#include "model_presets.h"
#include "moment_check.h"
#include "mpi_communicator.h"
#include "runner.h"
#include "runner_fixtures.h"
#include "tensor_parallel_model.h"

namespace shardplan::runner::testing {

namespace {

constexpr int kContextParallel = 2;

// The whole model on every rank, or with TP its TP rank's slice (Note [Tensor-parallel split], written from
// tensor_parallel_model.h): its units' shards of a whole-model buffer.
struct WholeShards {
  runtime::ModelLayout whole;
  Runner& runner;
  std::vector<std::vector<float>> of(const std::vector<float>& whole_flat) const {
    if (runner.tensor_parallel_degree() == 1) return rank_unit_shards(runner, whole_flat);
    const runtime::ModelLayout& mine = runner.model_layout();
    std::vector<float> slice(static_cast<std::size_t>(mine.element_count));
    runtime::extract_tensor_parallel_rank(whole, mine, runner.tensor_parallel_degree(), runner.tensor_parallel_rank(),
                                          whole_flat, slice);
    return rank_unit_shards(runner, slice);
  }
};

std::string where(Runner& runner, FlatParam& param) {
  return "CP rank " + std::to_string(runner.context_parallel_rank()) + ", TP rank " +
         std::to_string(runner.tensor_parallel_rank()) + ", unit '" + param.sizes().name + "' shard " +
         std::to_string(param.shard_index());
}

// Written from torch's _generate_round_robin_indices (Note [Load-balanced positions]), not read from the runner:
// rank r of cp holds chunks r and 2cp − 1 − r of the 2cp chunks of every sequence.
void check_share(const runtime::Batch& whole, int rank) {
  const runtime::Batch share = context_parallel_share(whole, kContextParallel, rank);
  const int chunk = whole.seq_len / (2 * kContextParallel);
  REQUIRE(share.seq_len == whole.seq_len / kContextParallel);
  REQUIRE(share.micro_batch == whole.micro_batch);
  for (int sequence = 0; sequence < whole.micro_batch; ++sequence) {
    for (int i = 0; i < share.seq_len; ++i) {
      const int owned = i < chunk ? rank : 2 * kContextParallel - 1 - rank;
      const auto from = static_cast<std::size_t>(sequence * whole.seq_len + owned * chunk + i % chunk);
      const auto to = static_cast<std::size_t>(sequence * share.seq_len + i);
      INFO("sequence ", sequence, ", token ", i, " of CP rank ", rank);
      CHECK(share.tokens[to] == whole.tokens[from]);
      CHECK(share.targets[to] == whole.targets[from]);
    }
  }
}

struct ContextParallelCase {
  ModelSpec model;
  int micro_batches = 4;  // per step on each batch rank
  ParameterCheck parameters{false, 0.0};  // by default every element within test_equivalence.cpp's 1e-5
  int tensor_parallel = 1;  // TP beside CP (mesh [dp_shard, cp, tp])
  // Steps whose AdamW moments are compared, and after the last of which the parameters are (Note [Ill-conditioned
  // first step] in test_tensor_parallel.cpp); losses, messages and memory at every step.
  int compared_steps = 3;
};

void check_context_parallel(const ContextParallelCase& c) {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  const int tp = c.tensor_parallel;
  // CP 2 × FSDP 2 on exactly 4 ranks; beside TP 2, on 4 (FSDP over the 2 CP ranks of a TP slice) or 8.
  if (tp == 1 ? size != 2 * kContextParallel : size % (kContextParallel * tp) != 0 || size < 2 * kContextParallel) {
    SKIP_CASE("CP " + std::to_string(kContextParallel) + (tp > 1 ? " × TP " + std::to_string(tp) : std::string()) +
              " × FSDP runs on " + std::to_string(2 * kContextParallel) + " ranks, got " + std::to_string(size));
  }
  const ModelSpec& model = c.model;
  const int batch_ranks = size / (kContextParallel * tp);
  const int micro_batch = 2, seq_len = 16, micro_batches = c.micro_batches, steps = 3;
  TrainingConfig training =
      fp32_training(seq_len, micro_batch, static_cast<std::int64_t>(micro_batch) * micro_batches * batch_ranks);
  // torch's context_parallel runs SDPA's flash and efficient kernels only (validate_context_parallel); the CPU ring
  // keeps no probabilities either (Note [Ring attention core]).
  training.flash_attention = true;
  // FSDP over all 4 ranks (dp_shard × cp), as `plan --context-parallel 2` on 4 ranks makes it; the accumulation is
  // over the batch ranks (cli/cmd_plan.cpp: global batch / (micro-batch × world / cp)).
  Plan plan = strategy_plan(model, training, "full_shard", size / tp);
  plan.context_parallel.degree = kContextParallel;
  plan.tensor_parallel_degree = tp;
  plan.grad_accumulation_steps = micro_batches;
  RunnerOptions options;
  options.seed = 11;
  Runner runner(model, plan, world, options);
  // torchtitan's mesh order [dp_shard, cp, tp]: the CP ranks of a group are consecutive but for TP inside.
  CHECK(runner.context_parallel_degree() == kContextParallel);
  CHECK(runner.tensor_parallel_degree() == tp);
  CHECK(runner.context_parallel_rank() == world.rank() / tp % kContextParallel);
  CHECK(runner.tensor_parallel_rank() == world.rank() % tp);
  CHECK(runner.data_parallel_size() == batch_ranks);
  CHECK(runner.data_parallel_rank() == world.rank() / (kContextParallel * tp));
  const int k = runner.schedule().micro_batches;
  REQUIRE(k == micro_batches);
  const auto data = test_data(micro_batch, seq_len);
  const ReferenceRun reference = reference_training(model, data, steps, k, batch_ranks, options.seed, options.adamw);
  const WholeShards shards{runtime::model_layout(model), runner};

  // What one step must post, read from this rank's program: its collective ops (FSDP's over the dp_shard × cp ranks)
  // and its passes' TP collectives, and per ring `send` op one message sent and one received of the op's bytes.
  const StepSchedule& program = runner.schedule();
  const comm::CommCounters expected = schedule_collectives(program, tp);
  comm::P2pCounters expected_p2p;
  for (const Op& op : program.ops) {
    if (op.kind != OpKind::send) continue;
    expected_p2p.sends.calls += 1;
    expected_p2p.sends.bytes += static_cast<std::uint64_t>(op.bytes);
  }
  expected_p2p.recvs = expected_p2p.sends;
  // Note [Ring attention]: per block and micro-batch, forward cp − 1 K/V steps, backward cp − 1 K/V and cp dK/dV,
  // each K and V of micro_batch × seq/cp tokens × every query head's head_dim fp32 floats (the block repeats K and V
  // up to the query heads first, Note [Repeated K/V] in executor/runtime/ring_attention.h) — a TP rank's heads.
  const auto& arch = *model.architecture;
  const std::uint64_t blocks = static_cast<std::uint64_t>(arch.num_layers);
  const std::uint64_t ring_buffer = 2ull * micro_batch * (seq_len / kContextParallel) * (arch.num_heads / tp) *
                                    (arch.hidden_size / arch.num_heads) * 4;
  CHECK(expected_p2p.sends.calls ==
        static_cast<std::uint64_t>(k) * blocks * (2 * (kContextParallel - 1) + kContextParallel));
  CHECK(expected_p2p.sends.bytes == expected_p2p.sends.calls * ring_buffer);
  CHECK(runner.expected_step_p2p().sends.calls == expected_p2p.sends.calls);
  const comm::CommCounters runner_expected = runner.expected_step_collectives();
  for (std::size_t kind = 0; kind < comm::kCollectiveKinds; ++kind) {
    CHECK(runner_expected.tallies[kind].calls == expected.tallies[kind].calls);
  }

  for (int step = 0; step < steps; ++step) {
    const auto batches = rank_micro_batches(data, step, k, batch_ranks, runner.data_parallel_rank());
    if (step == 0) {
      for (const runtime::Batch& batch : batches) check_share(batch, runner.context_parallel_rank());
    }
    const StepReport report = runner.step(batches);
    const double reference_loss = reference.losses[static_cast<std::size_t>(step)];
    INFO("step ", step, ": loss ", report.loss, " vs reference ", reference_loss);
    CHECK(close(report.loss, reference_loss, 1e-5));
    const auto reference_until = [&](int until) {
      return reference_training(model, data, until, k, batch_ranks, options.seed, options.adamw);
    };
    check_compared_step(runner, shards, reference, step, c.compared_steps, steps, reference_until, options.adamw,
                        where, c.parameters);
    const std::string counts = check_collectives(report.collectives, expected);
    const std::string messages = check_p2p(report.p2p, expected_p2p);
    // The program's activations are the flash-attention plan's (no probabilities) on seq / cp tokens: the ring keeps
    // q, k, v, the context and the log-sum-exp, as the flash kernel does (measured: +0.1% and +0.4%; beside TP too).
    const std::string memory = check_tracked_memory(report, program);
    MESSAGE("rank ", world.rank(), " step ", step, ": loss ", report.loss, " vs reference ", reference_loss,
            "; run/program:", counts, "; ", messages, "; ", memory);
  }
  check_gathered(runner, shards, reference, where);
}

}  // namespace

// The must-show case of issue 33, its context-parallel half: mpirun -np 4, CP 2 × FSDP 2 (full_shard over the 4
// dp_shard × cp ranks) on tiny-llama, 4 micro-batches of 2 sequences of 16 tokens a step on each of the 2 batch ranks
// (the pipeline test's global batch). The final parameters are compared as the pipeline test compares them (Note
// [Ill-conditioned first step] in test_tensor_parallel.cpp) with a movement bound of 2e-5 and a left-out bound of 2%:
// measured, the same plan without CP (FSDP over 4 ranks, the same global batch) already gives ‖Δp − Δp_ref‖/‖Δp_ref‖
// 1.02e-5 in a shard of model.layers.3, where the filter leaves out 771 of 46144 elements (1.7%: 4-way shards are
// small); with CP the worst shard is 1.47e-5. The gradients themselves — AdamW's moments, every step — are within
// 1e-5, and small-llama below meets the elementwise check of every element.
// Mutations tried (each rebuilt and run on this case; every one fails it):
// - load_balanced_positions giving rank r the contiguous chunks 2r and 2r + 1: the losses, moments and parameters
//   still equal the reference's (any split the tokens, RoPE and mask agree on is exact attention), and check_share
//   fails on every token of every rank — which is why the share is checked against torch's chunks on its own;
// - the dK/dV ring's result dropped (each rank keeping the gradients it accumulated for its neighbour's keys): m and
//   v off from step 0 in every block unit (‖m − m_ref‖/‖m_ref‖ 0.12..0.66);
// - RoPE at CP rank 0's positions on every rank: losses off from step 0 (5.56345 vs 5.56375).
TEST_CASE("runner: context_parallel 2 × full_shard 2 trains tiny-llama like the reference") {
  check_context_parallel({tiny_llama(), 4, {true, 0.001, 2e-5, 0.02}});
}

// small-llama, test_equivalence.cpp's model: every parameter within its elementwise tolerance after 3 steps.
TEST_CASE("runner: context_parallel 2 × full_shard 2 trains small-llama like the reference") {
  check_context_parallel({small_llama(), 2});
}

// CP beside TP (torchtitan's [dp_shard, cp, tp] mesh, its 4-D recipes' inner dimensions): at 4 ranks CP 2 × TP 2
// (FSDP over the 2 CP ranks of each TP slice), at 8 FSDP 2 × CP 2 × TP 2. tiny-llama compares the moments and
// parameters after the first step, as test_tensor_parallel.cpp's tiny-llama case does (Note [Ill-conditioned first
// step]), with test_context_parallel's left-out bound of 2 % for its smaller shards (measured at 8 ranks: 1.1-1.7 %,
// movement ≤ 2.9e-7); small-llama the moments at every step and the parameters after 3 by the movement check over
// the well-conditioned elements: measured at 4 ranks, every element within 1e-5 but one of 1760 in a block shard
// (1.7e-5), whose movement is 2.0e-5 — the step-0 gradient summed over TP partial products, the ring's merges and
// FSDP's ranks, each in its own order.
TEST_CASE("runner: context_parallel 2 × tensor_parallel 2 × full_shard trains tiny-llama like the reference") {
  check_context_parallel(
      {.model = tiny_llama(), .parameters = {true, -1, 1e-5, 0.02}, .tensor_parallel = 2, .compared_steps = 1});
}

TEST_CASE("runner: context_parallel 2 × tensor_parallel 2 × full_shard trains small-llama like the reference") {
  check_context_parallel({.model = small_llama(), .micro_batches = 2, .parameters = {}, .tensor_parallel = 2});
}

}  // namespace shardplan::runner::testing
