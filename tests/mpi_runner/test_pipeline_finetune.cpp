// Fine-tuning under pipeline and context parallelism (PP 2 outer, FSDP 2 over each stage's ranks; CP 2 × FSDP 2; PP 2
// × CP 2): LoRA adapters and frozen layers train like the single-process reference — losses, the whole model gathered
// back (frozen elements bit-identical, trainable ones moved as the reference moved them), each rank's frozen shards
// unchanged at every step, and per step the collectives and point-to-point messages the rank's program lists.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "case_skip.h"
#include "finetune_apply.h"
#include "finetune_reference.h"
#include "model_presets.h"
#include "moment_check.h"
#include "mpi_communicator.h"
#include "runner.h"
#include "runner_fixtures.h"

namespace shardplan::runner::testing {

namespace {

struct PipelineFinetuneCase {
  FinetuneConfig finetune;
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int stages_per_rank = 1;
  int pipeline = 2;          // 1: no pipeline
  int context_parallel = 1;  // CP inside each stage (Note [Context-parallel runner])
};

FinetuneConfig lora_on_every_projection() {
  FinetuneConfig config;
  config.mode = FinetuneMode::lora;
  config.lora.r = 4;
  config.lora.alpha = 8;
  config.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return config;
}

// The embedding and the first block frozen: on pipeline rank 0 they run no backward kernel
// (LayerFinetune::backward_needed, which the runner reads from its own stages' layers) and their unit no reduction,
// while the stage after it still sends the gradient of its input back for the trainable block before it.
FinetuneConfig frozen_first_block() {
  FinetuneConfig config;
  config.mode = FinetuneMode::frozen;
  config.freeze = {"model.embed_tokens.*", "model.layers.0.*"};
  return config;
}

void check_pipeline_finetune(const PipelineFinetuneCase& c) {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  const int pp = c.pipeline, cp = c.context_parallel;
  if (size % (pp * cp) != 0 || size < 4) {
    SKIP_CASE("PP " + std::to_string(pp) + " × CP " + std::to_string(cp) + " × FSDP needs a multiple of " +
              std::to_string(pp * cp) + " ranks and at least 4, got " + std::to_string(size) + " (runs at 4)");
  }
  const ModelSpec model = finetuned_model(tiny_llama(), c.finetune, FinetuneFieldNames::cli());
  // The data-parallel ranks that take micro-batches of their own; FSDP shards over them × cp (dp_shard × cp).
  const int data_parallel = size / (pp * cp), micro_batch = 2, seq_len = 16, micro_batches = 4, steps = 3;
  TrainingConfig training =
      fp32_training(seq_len, micro_batch, static_cast<std::int64_t>(micro_batch) * micro_batches * data_parallel);
  training.finetune = c.finetune;
  training.flash_attention = cp > 1;  // as test_context_parallel.cpp's plans
  Plan plan = strategy_plan(model, training, "full_shard", data_parallel * cp);
  plan.context_parallel.degree = cp;
  plan.grad_accumulation_steps = micro_batches;
  if (pp > 1) plan.pipeline = default_pipeline(model, pp, c.schedule, c.stages_per_rank);
  RunnerOptions options;
  options.seed = 5;
  Runner runner(model, plan, world, options);
  const int k = runner.schedule().micro_batches;
  REQUIRE(k == micro_batches);
  const auto data = test_data(micro_batch, seq_len);
  const ReferenceRun reference =
      finetune_reference(model, data, steps, k, data_parallel, options.seed, options.adamw);
  const std::string label = std::string(to_string(c.finetune.mode)) + ", PP " + std::to_string(pp) + " " +
                            to_string(c.schedule) + ", CP " + std::to_string(cp) + ", pipeline rank " +
                            std::to_string(runner.pipeline_rank());

  std::vector<std::vector<float>> frozen_before;
  for (FlatParam* param : runner.flat_params()) {
    frozen_before.emplace_back(param->frozen_shard().begin(), param->frozen_shard().end());
  }
  const comm::CommCounters expected = runner.expected_step_collectives();
  const comm::P2pCounters expected_p2p = runner.expected_step_p2p();
  CHECK(expected_p2p.sends.calls > 0);
  for (int step = 0; step < steps; ++step) {
    const StepReport report =
        runner.step(rank_micro_batches(data, step, k, data_parallel, runner.data_parallel_rank()));
    const auto s = static_cast<std::size_t>(step);
    INFO(label, ", step ", step, ": loss ", report.loss, " vs reference ", reference.losses[s]);
    CHECK(close(report.loss, reference.losses[s], 1e-5));
    const std::string counts = check_collectives(report.collectives, expected);
    const std::string messages = check_p2p(report.p2p, expected_p2p);
    std::size_t unit = 0;
    for (FlatParam* param : runner.flat_params()) {
      const std::vector<float> frozen(param->frozen_shard().begin(), param->frozen_shard().end());
      INFO("unit '", param->sizes().name, "' shard ", param->shard_index());
      CHECK(frozen.size() == frozen_before[unit].size());
      CHECK((frozen.empty() ||
             std::memcmp(frozen.data(), frozen_before[unit].data(), frozen.size() * sizeof(float)) == 0));
      ++unit;
    }
    if (world.rank() == 0 || world.rank() == size - 1) {
      MESSAGE(label, ", step ", step, ": loss ", report.loss, " vs reference ", reference.losses[s],
              "; run/program:", counts, "; ", messages);
    }
  }
  // The whole model gathered from every stage: frozen elements bit-identical, trainable ones as the reference trained
  // them (test_finetune.cpp's Note [Fine-tuning tolerance]: tiny-llama's movement bound 1e-4).
  const std::vector<float> params = runner.gather_parameters();
  REQUIRE(params.size() == reference.final_params.size());
  const GatheredFinetune gathered = compare_gathered(params, reference, runtime::model_layout(model));
  INFO(label, ": ", gathered.trainable, " trainable of ", params.size(), " elements");
  CHECK(gathered.trainable < params.size());
  CHECK(gathered.frozen_changed == 0);
  if (world.rank() == 0) MESSAGE(label, ": ‖Δp − Δp_ref‖/‖Δp_ref‖ = ", gathered.moved);
  CHECK(gathered.moved <= 1e-4);  // 1 when nothing trained
}

}  // namespace

TEST_CASE("runner: pipeline 1F1B 2 × full_shard 2 fine-tunes LoRA adapters like the reference, base bit-identical") {
  check_pipeline_finetune({lora_on_every_projection()});
}

TEST_CASE("runner: pipeline Interleaved1F1B 2 × 2 stages × full_shard 2 fine-tunes LoRA adapters like the reference") {
  check_pipeline_finetune({lora_on_every_projection(), PipelineScheduleKind::interleaved_1f1b, 2});
}

TEST_CASE("runner: pipeline 1F1B 2 × full_shard 2 with a frozen embedding and block trains like the reference") {
  check_pipeline_finetune({frozen_first_block()});
}

// Context parallelism with fine-tuning: the ring's blocks train their adapters (CP 2 × FSDP 2), and with a pipeline
// (PP 2 × CP 2, FSDP over each stage's CP ranks).
TEST_CASE("runner: context_parallel 2 × full_shard 2 fine-tunes LoRA adapters like the reference, base bit-identical") {
  check_pipeline_finetune({.finetune = lora_on_every_projection(), .pipeline = 1, .context_parallel = 2});
}

TEST_CASE("runner: pipeline 1F1B 2 × context_parallel 2 fine-tunes LoRA adapters like the reference") {
  check_pipeline_finetune({.finetune = lora_on_every_projection(), .context_parallel = 2});
}

}  // namespace shardplan::runner::testing
