// Pipeline parallelism × FSDP (PP 2 outer, FSDP 2 over each stage's ranks) trains like the single-process reference
// under 1F1B and Interleaved1F1B: losses, AdamW's moments (the reduced gradients), final parameters, and per step the
// collectives equal the rank's program's collective ops, the point-to-point messages its send and recv ops, and the
// tracked model-state memory its bytes.
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

namespace shardplan::runner::testing {

namespace {

constexpr int kPipeline = 2;

struct PipelineCase {
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int stages_per_rank = 1;
  int micro_batches = 4;  // per step on each data-parallel rank
  // Steps whose AdamW moments are compared, and after the last of which the parameters are (Note [Ill-conditioned
  // first step] in test_tensor_parallel.cpp); losses and message counts are compared at every step.
  int compared_steps = 3;
};

// The whole-model layers pipeline rank `rank` holds, from the plan's stages by torch's loop placement (stage s on
// rank s mod pp) — written here from Note [Pipeline programs], not read from the runner.
std::vector<std::size_t> held_layers(const PipelinePolicy& pipeline, int rank) {
  std::vector<std::size_t> layers;
  for (std::size_t stage = static_cast<std::size_t>(rank); stage < pipeline.stages.size();
       stage += static_cast<std::size_t>(pipeline.degree)) {
    for (std::size_t layer = pipeline.stages[stage].begin; layer < pipeline.stages[stage].end; ++layer) {
      layers.push_back(layer);
    }
  }
  return layers;
}

// This rank's shard of every unit, cut from a whole-model buffer of the reference: its stages' layers, then each
// unit's FSDP shard of them (unit_slice, from the layout definitions).
struct StageShards {
  runtime::ModelLayout whole;
  std::vector<std::size_t> layers;
  Runner& runner;

  std::vector<std::vector<float>> of(const std::vector<float>& whole_flat) const {
    const runtime::ModelLayout& mine = runner.model_layout();
    REQUIRE(mine.layers.size() == layers.size());
    std::vector<float> part(static_cast<std::size_t>(mine.element_count));
    for (std::size_t layer = 0; layer < layers.size(); ++layer) {
      REQUIRE(mine.layers[layer].element_count == whole.layers[layers[layer]].element_count);
      const auto from = whole_flat.begin() + whole.layer_offsets_elements[layers[layer]];
      std::copy(from, from + mine.layers[layer].element_count, part.begin() + mine.layer_offsets_elements[layer]);
    }
    return rank_unit_shards(runner, part);
  }
};

std::string where(Runner& runner, FlatParam& param) {
  return "pipeline rank " + std::to_string(runner.pipeline_rank()) + ", unit '" + param.sizes().name + "' shard " +
         std::to_string(param.shard_index());
}

void check_pipeline(const PipelineCase& c) {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  if (size % kPipeline != 0 || size < 2 * kPipeline) {
    SKIP_CASE("PP " + std::to_string(kPipeline) + " × FSDP needs a multiple of " + std::to_string(2 * kPipeline) +
              " ranks, got " + std::to_string(size) + " (runs at 4)");
  }
  const ModelSpec model = tiny_llama();
  const int data_parallel = size / kPipeline;
  const int micro_batch = 2, seq_len = 16, steps = 3;
  const TrainingConfig training =
      fp32_training(seq_len, micro_batch, static_cast<std::int64_t>(micro_batch) * c.micro_batches * data_parallel);
  // FSDP over each stage's `data_parallel` ranks; the pipeline as `plan --pipeline-parallel` makes it.
  Plan plan = strategy_plan(model, training, "full_shard", data_parallel);
  plan.pipeline = default_pipeline(model, kPipeline, c.schedule, c.stages_per_rank);
  REQUIRE(plan.grad_accumulation_steps == c.micro_batches);
  RunnerOptions options;
  options.seed = 11;
  Runner runner(model, plan, world, options);
  // torchtitan's mesh order [pp, dp_shard] (Note [ParallelDims]): pp outermost.
  CHECK(runner.pipeline_degree() == kPipeline);
  CHECK(runner.pipeline_rank() == world.rank() / data_parallel);
  CHECK(runner.data_parallel_rank() == world.rank() % data_parallel);
  const int k = runner.schedule().micro_batches;
  REQUIRE(k == c.micro_batches);
  const auto data = test_data(micro_batch, seq_len);
  const ReferenceRun reference = reference_training(model, data, steps, k, data_parallel, options.seed, options.adamw);
  const StageShards shards{runtime::model_layout(model), held_layers(plan.pipeline, runner.pipeline_rank()), runner};

  // What one step must post, read from this rank's program: its collective ops (FSDP's, over the stage's ranks) and
  // one message per send and per recv op, of the op's bytes.
  const StepSchedule& program = runner.schedule();
  const comm::CommCounters expected = Runner::expected_collectives(program);
  comm::P2pCounters expected_p2p;
  for (const Op& op : program.ops) {
    if (op.kind == OpKind::send) expected_p2p.sends = {expected_p2p.sends.calls + 1,
                                                       expected_p2p.sends.bytes + static_cast<std::uint64_t>(op.bytes)};
    if (op.kind == OpKind::recv) expected_p2p.recvs = {expected_p2p.recvs.calls + 1,
                                                       expected_p2p.recvs.bytes + static_cast<std::uint64_t>(op.bytes)};
  }
  // Every stage boundary a micro-batch crosses: one activation and one gradient each way per held boundary.
  CHECK(expected_p2p.sends.calls > 0);
  CHECK(expected_p2p.sends.calls + expected_p2p.recvs.calls ==
        static_cast<std::uint64_t>(k) * 2 * (2 * c.stages_per_rank * kPipeline - 2) / kPipeline);
  CHECK(expected_p2p.sends.bytes == expected_p2p.sends.calls * micro_batch * seq_len * model.hidden_size * 4);

  for (int step = 0; step < steps; ++step) {
    const auto batches = rank_micro_batches(data, step, k, data_parallel, runner.data_parallel_rank());
    const StepReport report = runner.step(batches);
    const double reference_loss = reference.losses[static_cast<std::size_t>(step)];
    INFO(std::string(to_string(c.schedule)), ", step ", step, ": loss ", report.loss, " vs reference ", reference_loss);
    CHECK(close(report.loss, reference_loss, 1e-5));
    if (step < c.compared_steps) check_moments(runner, shards, reference, step, where);
    if (step + 1 == c.compared_steps) check_parameters(runner, shards, reference, options.adamw, where);
    const std::string counts = check_collectives(report.collectives, expected);
    // The tracked model-state memory is the program's (test_accounting.cpp's categories): each rank holds and
    // gathers only its stages' units, kept gathered through the step, gradients accumulated unsharded.
    // Activations within 2% (measured: +0.1% on both schedules).
    const std::string memory = check_tracked_memory(report, program);
    const std::string messages = check_p2p(report.p2p, expected_p2p);
    if (world.rank() == 0 || world.rank() == size - 1) {
      MESSAGE(std::string(to_string(c.schedule)), " rank ", world.rank(), " step ", step, ": loss ", report.loss,
              " vs reference ", reference_loss, "; run/program:", counts, "; ", messages, "; ", memory);
    }
  }
  check_gathered(runner, shards, reference, where);
}

}  // namespace

// The must-show case of issue 33: mpirun -np 4, PP 2 × FSDP 2 (full_shard) on tiny-llama, 4 micro-batches a step.
// Mutations tried (each rebuilt and run on both cases; every one fails both):
// - PipelineP2p::recv matching micro-batch m ^ 1's message (micro-batches paired out of order): losses off from step 0
//   (5.56109 vs 5.56375), moments off in every unit;
// - saved activations kept per layer only, not per (micro-batch, layer): 1F1B's second forward replaces the first's,
//   whose backward then finds none (InternalError in the head's backward on the last stage).
TEST_CASE("runner: pipeline 1F1B 2 × full_shard 2 trains tiny-llama like the reference") {
  check_pipeline({PipelineScheduleKind::one_f_one_b, 1});
}

TEST_CASE("runner: pipeline Interleaved1F1B 2 × 2 stages × full_shard 2 trains tiny-llama like the reference") {
  check_pipeline({PipelineScheduleKind::interleaved_1f1b, 2});
}

}  // namespace shardplan::runner::testing
