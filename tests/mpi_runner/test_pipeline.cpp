// Pipeline parallelism × FSDP (PP 2 outer, FSDP 2 over each stage's ranks), and × tensor parallelism (PP 2 × FSDP ×
// TP 2 inner, torchtitan's 3-D mesh), trains like the single-process reference under 1F1B, Interleaved1F1B and
// InterleavedZeroBubble:
// losses, AdamW's moments (the reduced gradients), final parameters, and per step the collectives equal the rank's
// program's collective ops (and its passes' TP collectives), the point-to-point messages its send and recv ops, and
// the tracked model-state memory its bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "case_skip.h"
#include "decoder_builder.h"
#include "model_presets.h"
#include "mpi_communicator.h"
#include "runner.h"
#include "moment_check.h"
#include "runner_fixtures.h"
#include "tensor_parallel_model.h"

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
  int tensor_parallel = 1;   // TP degree inside each stage (Note [2-D mesh]: TP inner)
  int context_parallel = 1;  // or CP degree (Note [Context-parallel runner]: CP inner)
  int blocks = 0;            // tiny-llama with this many blocks (0: its own 4)
  // How the final parameters are compared (Note [Ill-conditioned first step] in test_tensor_parallel.cpp).
  ParameterCheck parameters{};
};

// tiny-llama's architecture with `blocks` decoder blocks: deep enough for more stages per rank.
ModelSpec tiny_llama_with_blocks(int blocks) {
  DecoderArchitecture architecture = find_model_preset("tiny-llama")->architecture;
  architecture.num_layers = blocks;
  return build_decoder("tiny-llama-" + std::to_string(blocks), architecture, "test");
}

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

// The model of `layers` of `model`, unsplit: the widths a pipeline rank's TP slice is cut from.
ModelSpec layers_model(const ModelSpec& model, const std::vector<std::size_t>& layers) {
  ModelSpec held = model;
  held.layers.clear();
  for (std::size_t layer : layers) held.layers.push_back(model.layers[layer]);
  return held;
}

// This rank's shard of every unit, cut from a whole-model buffer of the reference: its stages' layers, then its TP
// rank's slice of them (Note [Tensor-parallel split], tensor_parallel_model.h), then each unit's FSDP shard
// (unit_slice, from the layout definitions).
struct StageShards {
  runtime::ModelLayout whole;
  runtime::ModelLayout held;  // the stages' layers, unsplit
  std::vector<std::size_t> layers;
  Runner& runner;

  std::vector<std::vector<float>> of(const std::vector<float>& whole_flat) const {
    REQUIRE(held.layers.size() == layers.size());
    std::vector<float> part(static_cast<std::size_t>(held.element_count));
    for (std::size_t layer = 0; layer < layers.size(); ++layer) {
      REQUIRE(held.layers[layer].element_count == whole.layers[layers[layer]].element_count);
      const auto from = whole_flat.begin() + whole.layer_offsets_elements[layers[layer]];
      std::copy(from, from + held.layers[layer].element_count, part.begin() + held.layer_offsets_elements[layer]);
    }
    const runtime::ModelLayout& mine = runner.model_layout();
    REQUIRE(mine.layers.size() == layers.size());
    if (runner.tensor_parallel_degree() == 1) return rank_unit_shards(runner, part);
    std::vector<float> slice(static_cast<std::size_t>(mine.element_count));
    runtime::extract_tensor_parallel_rank(held, mine, runner.tensor_parallel_degree(), runner.tensor_parallel_rank(),
                                          part, slice);
    return rank_unit_shards(runner, slice);
  }
};

std::string where(Runner& runner, FlatParam& param) {
  return "pipeline rank " + std::to_string(runner.pipeline_rank()) + ", TP rank " +
         std::to_string(runner.tensor_parallel_rank()) + ", CP rank " + std::to_string(runner.context_parallel_rank()) +
         ", unit '" + param.sizes().name + "' shard " + std::to_string(param.shard_index());
}

void check_pipeline(const PipelineCase& c) {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  const int tp = c.tensor_parallel, cp = c.context_parallel;
  const int inner = tp * cp;  // one of them, inside each stage
  // FSDP 2 per stage alone; with TP or CP, FSDP over what the 2 × 2 mesh leaves (1 at 4 ranks, 2 at 8).
  const int smallest = kPipeline * inner * (inner == 1 ? 2 : 1);
  if (size % (kPipeline * inner) != 0 || size < smallest) {
    SKIP_CASE("PP " + std::to_string(kPipeline) + (tp > 1 ? " × TP " + std::to_string(tp) : std::string()) +
              (cp > 1 ? " × CP " + std::to_string(cp) : std::string()) + " × FSDP needs a multiple of " +
              std::to_string(smallest) + " ranks, got " + std::to_string(size) + " (runs at 4)");
  }
  const ModelSpec model = c.blocks > 0 ? tiny_llama_with_blocks(c.blocks) : tiny_llama();
  const int data_parallel = size / (kPipeline * inner);  // the ranks that take micro-batches of their own, per stage
  const int micro_batch = 2, seq_len = 16, steps = 3;
  TrainingConfig training =
      fp32_training(seq_len, micro_batch, static_cast<std::int64_t>(micro_batch) * c.micro_batches * data_parallel);
  // torch's context_parallel runs SDPA's flash and efficient kernels only (as test_context_parallel.cpp's plan).
  training.flash_attention = cp > 1;
  // FSDP over each stage's `data_parallel` × cp ranks (torchtitan's dp_shard × cp) of each TP slice; the pipeline
  // as `plan --pipeline-parallel` makes it; the accumulation over the data-parallel ranks' micro-batches.
  Plan plan = strategy_plan(model, training, "full_shard", data_parallel * cp);
  plan.tensor_parallel_degree = tp;
  plan.context_parallel.degree = cp;
  plan.pipeline = default_pipeline(model, kPipeline, c.schedule, c.stages_per_rank);
  if (cp == 1) REQUIRE(plan.grad_accumulation_steps == c.micro_batches);
  plan.grad_accumulation_steps = c.micro_batches;
  RunnerOptions options;
  options.seed = 11;
  Runner runner(model, plan, world, options);
  // torchtitan's mesh order [pp, dp_shard, cp, tp] (Note [ParallelDims]): pp outermost, tp innermost.
  CHECK(runner.pipeline_degree() == kPipeline);
  CHECK(runner.tensor_parallel_degree() == tp);
  CHECK(runner.context_parallel_degree() == cp);
  CHECK(runner.pipeline_rank() == world.rank() / (data_parallel * inner));
  CHECK(runner.data_parallel_rank() == world.rank() / inner % data_parallel);
  CHECK(runner.tensor_parallel_rank() == world.rank() % tp);
  CHECK(runner.context_parallel_rank() == world.rank() / tp % cp);
  const int k = runner.schedule().micro_batches;
  REQUIRE(k == c.micro_batches);
  const auto data = test_data(micro_batch, seq_len);
  const ReferenceRun reference = reference_training(model, data, steps, k, data_parallel, options.seed, options.adamw);
  const std::vector<std::size_t> layers = held_layers(plan.pipeline, runner.pipeline_rank());
  const StageShards shards{runtime::model_layout(model), runtime::model_layout(layers_model(model, layers)), layers,
                           runner};

  // What one step must post, read from this rank's program: its collective ops (FSDP's, over the stage's ranks) and
  // its passes' TP collectives; one message per send and per recv op between stages, of the op's bytes; and per
  // ring `send` op (CP) one message sent and one received.
  const StepSchedule& program = runner.schedule();
  const comm::CommCounters expected = schedule_collectives(program, tp);
  comm::P2pCounters expected_p2p;
  comm::CollectiveTally ring;
  const auto add = [](comm::CollectiveTally& tally, const Op& op) {
    tally = {tally.calls + 1, tally.bytes + static_cast<std::uint64_t>(op.bytes)};
  };
  for (const Op& op : program.ops) {
    if (op.kind == OpKind::send && op.peer_stage < 0) {
      add(ring, op);
    } else if (op.kind == OpKind::send) {
      add(expected_p2p.sends, op);
    } else if (op.kind == OpKind::recv) {
      add(expected_p2p.recvs, op);
    }
  }
  // Every stage boundary a micro-batch crosses: one activation and one gradient each way per held boundary, each
  // TP rank's sequence shard or CP rank's share of it (Note [Pipeline programs]).
  CHECK(expected_p2p.sends.calls > 0);
  CHECK(expected_p2p.sends.calls + expected_p2p.recvs.calls ==
        static_cast<std::uint64_t>(k) * 2 * (2 * c.stages_per_rank * kPipeline - 2) / kPipeline);
  CHECK(expected_p2p.sends.bytes ==
        expected_p2p.sends.calls * micro_batch * seq_len / inner * model.hidden_size * 4);
  // Note [Ring attention]: per held block and micro-batch, forward cp − 1 K/V steps, backward cp − 1 K/V and cp dK/dV.
  const auto blocks = static_cast<std::uint64_t>(std::count_if(layers.begin(), layers.end(), [&](std::size_t layer) {
    return model.layers[layer].kind == LayerKind::transformer_block;
  }));
  CHECK(ring.calls == (cp > 1 ? static_cast<std::uint64_t>(k) * blocks * (2 * (cp - 1) + cp) : 0));
  for (comm::CollectiveTally* tally : {&expected_p2p.sends, &expected_p2p.recvs}) {
    *tally = {tally->calls + ring.calls, tally->bytes + ring.bytes};
  }
  const comm::P2pCounters runner_p2p = runner.expected_step_p2p();
  CHECK(runner_p2p.sends.calls == expected_p2p.sends.calls);
  CHECK(runner_p2p.recvs.bytes == expected_p2p.recvs.bytes);
  const comm::CommCounters runner_expected = runner.expected_step_collectives();
  for (std::size_t kind = 0; kind < comm::kCollectiveKinds; ++kind) {
    CHECK(runner_expected.tallies[kind].calls == expected.tallies[kind].calls);
  }

  for (int step = 0; step < steps; ++step) {
    const auto batches = rank_micro_batches(data, step, k, data_parallel, runner.data_parallel_rank());
    const StepReport report = runner.step(batches);
    const double reference_loss = reference.losses[static_cast<std::size_t>(step)];
    INFO(std::string(to_string(c.schedule)), ", TP ", tp, ", CP ", cp, ", step ", step, ": loss ", report.loss,
         " vs reference ", reference_loss);
    CHECK(close(report.loss, reference_loss, 1e-5));
    const auto reference_until = [&](int until) {
      return reference_training(model, data, until, k, data_parallel, options.seed, options.adamw);
    };
    check_compared_step(runner, shards, reference, step, c.compared_steps, steps, reference_until, options.adamw,
                        where, c.parameters);
    const std::string counts = check_collectives(report.collectives, expected);
    // The tracked model-state memory is the program's (test_accounting.cpp's categories): each rank holds and
    // gathers only its stages' units, kept gathered through the step, gradients accumulated unsharded.
    // Activations within 2% (measured: +0.1% on both schedules, +0.1 … +0.4 % with TP or CP).
    const std::string memory = check_tracked_memory(report, program);
    const std::string messages = check_p2p(report.p2p, expected_p2p);
    if (world.rank() == 0 || world.rank() == size - 1) {
      MESSAGE(std::string(to_string(c.schedule)), " TP ", tp, " CP ", cp, " rank ", world.rank(), " step ", step,
              ": loss ", report.loss, " vs reference ", reference_loss, "; run/program:", counts, "; ", messages, "; ",
              memory);
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

// Note [Virtual stages searched] (planner/pipeline_grid.cpp): the search plans more than torchtitan's 2 stages per
// rank; 4 on a 14-block tiny-llama (16 effective layers, 2 per stage at pp 2, as the search requires). Losses and the
// collective and point-to-point counts are compared every step; the deeper model's first gradients are smaller, so
// (Note [Ill-conditioned first step]) moments and parameters after the first step, and up to 4.1 % of a shard's
// elements have a first gradient under 100ε (measured: 3,773 of 92,288; the filter reads the reference alone).
TEST_CASE("runner: pipeline Interleaved1F1B 2 × 4 stages × full_shard 2 trains a 14-block tiny-llama like the "
          "reference") {
  check_pipeline({.schedule = PipelineScheduleKind::interleaved_1f1b, .stages_per_rank = 4, .compared_steps = 1,
                  .blocks = 14, .parameters = {.left_out_share = 0.05}});
}

// Note [Split backward lowering]: the zero-bubble schedule's input parts park each layer's weight gradients, its
// weight parts add them and the last one of each unit reduces them; 2 stages per rank as torchtitan runs it.
TEST_CASE("runner: pipeline InterleavedZeroBubble 2 × 2 stages × full_shard 2 trains tiny-llama like the reference") {
  check_pipeline({PipelineScheduleKind::interleaved_zero_bubble, 2});
}

// With TP 2 in each stage: the input part runs the passes' TP collectives and sums the replicated gradients over the
// TP group (into the parked buffer), as the schedule's input-part kernels carry them.
TEST_CASE("runner: pipeline InterleavedZeroBubble 2 × 2 stages × tensor_parallel 2 × full_shard trains tiny-llama") {
  check_pipeline({.schedule = PipelineScheduleKind::interleaved_zero_bubble, .stages_per_rank = 2,
                  .compared_steps = 1, .tensor_parallel = 2, .parameters = {true, -1}});
}

// torchtitan's 3-D layout (PP × FSDP × TP, its 405B recipe's) on tiny-llama: at 4 ranks PP 2 × TP 2 (FSDP over one
// rank), at 8 PP 2 × FSDP 2 × TP 2. TP on tiny-llama compares the moments and parameters after the first step, as
// test_tensor_parallel.cpp's tiny-llama case does (Note [Ill-conditioned first step]); losses, collectives, messages
// and memory at every step.
TEST_CASE("runner: pipeline 1F1B 2 × tensor_parallel 2 × full_shard trains tiny-llama like the reference") {
  check_pipeline({.schedule = PipelineScheduleKind::one_f_one_b, .compared_steps = 1, .tensor_parallel = 2,
                  .parameters = {true, -1}});
}

TEST_CASE("runner: pipeline Interleaved1F1B 2 × 2 stages × tensor_parallel 2 × full_shard trains tiny-llama") {
  check_pipeline({.schedule = PipelineScheduleKind::interleaved_1f1b, .stages_per_rank = 2, .compared_steps = 1,
                  .tensor_parallel = 2, .parameters = {true, -1}});
}

// torchtitan's PP × CP (its 4-D recipes without TP): at 4 ranks PP 2 × CP 2 (FSDP over the 2 CP ranks of a stage),
// at 8 PP 2 × FSDP 2 × CP 2. The moments and parameters after the first step, with test_context_parallel.cpp's
// tiny-llama bounds: measured at 4 ranks, the steps after it leave v 1.06e-5..1.15e-5 from the reference in some units
// and one shard's movement 5.3e-5 (Note [Ill-conditioned first step]: the first step's rounding-level moves of
// elements with |g₀| ≈ ε carry into every later gradient), while losses, messages and memory match at every step.
TEST_CASE("runner: pipeline 1F1B 2 × context_parallel 2 × full_shard trains tiny-llama like the reference") {
  check_pipeline({.schedule = PipelineScheduleKind::one_f_one_b, .compared_steps = 1, .context_parallel = 2,
                  .parameters = {true, 0.001, 2e-5, 0.02}});
}

TEST_CASE("runner: pipeline Interleaved1F1B 2 × 2 stages × context_parallel 2 × full_shard trains tiny-llama") {
  check_pipeline({.schedule = PipelineScheduleKind::interleaved_1f1b, .stages_per_rank = 2, .compared_steps = 1,
                  .context_parallel = 2, .parameters = {true, 0.001, 2e-5, 0.02}});
}

// torchtitan's 4-D mesh [pp, dp_shard, cp, tp] (its 405B long-context recipe's, Table 6) on 8 ranks: PP 2 × CP 2 ×
// TP 2, FSDP over the 2 CP ranks of each stage's TP slice. Named apart ("runner: 4-D"): it needs 8 ranks, so the
// 4-rank entry leaves it out rather than show a skip (Note [Visible skips]). Compared as the TP cases above.
TEST_CASE("runner: 4-D pipeline 1F1B 2 × context_parallel 2 × tensor_parallel 2 trains tiny-llama like the reference") {
  check_pipeline({.schedule = PipelineScheduleKind::one_f_one_b, .compared_steps = 1, .tensor_parallel = 2,
                  .context_parallel = 2, .parameters = {true, -1, 1e-5, 0.02}});
}

}  // namespace shardplan::runner::testing
