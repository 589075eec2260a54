// Fine-tuning on the runner: LoRA and frozen-parameter plans on tiny-llama train their trainable parameters like the
// single-process reference, keep every frozen parameter bit-identical, and issue exactly the schedule's collectives —
// no reduce-scatter for a unit without trainable parameters.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "case_skip.h"
#include "errors.h"
#include "finetune_apply.h"
#include "model_presets.h"
#include "mpi_communicator.h"
#include "runner.h"
#include "finetune_reference.h"
#include "runner_fixtures.h"

namespace shardplan::runner::testing {

namespace {

struct FinetuneCase {
  std::string strategy = "full_shard";
  FinetuneConfig finetune;
  std::int64_t global_batch = 0;  // 0: one micro-batch per rank
  ActivationCheckpointing ac = ActivationCheckpointing::none;
  bool small = false;  // small_llama (the full-training tests' model) instead of tiny-llama
};

FinetuneConfig lora_config(std::vector<std::string> targets) {
  FinetuneConfig config;
  config.mode = FinetuneMode::lora;
  config.lora.r = 4;
  config.lora.alpha = 8;  // scaling 2, so a scaling left out shows
  config.lora.target_modules = std::move(targets);
  return config;
}

FinetuneConfig every_projection() {
  return lora_config({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
}

// tiny-llama's embedding (tied to the head) and its first block frozen: a root unit that mixes frozen and trainable
// parameters (the final norm trains) and a unit that trains nothing.
FinetuneConfig frozen_embedding_and_first_block() {
  FinetuneConfig config;
  config.mode = FinetuneMode::frozen;
  config.freeze = {"model.embed_tokens.*", "model.layers.0.*"};
  return config;
}

ModelSpec finetuned_tiny_llama(const FinetuneConfig& config, bool small = false) {
  return finetuned_model(small ? small_llama() : preset_model("tiny-llama"), config, FinetuneFieldNames::cli());
}

// Note [Fine-tuning tolerance]: the losses (relative 1e-5) and AdamW's moments (‖m − m_ref‖/‖m_ref‖ ≤ 1e-5, the
// reduced gradients themselves) are compared at the full-training tests' tolerances (test_equivalence.cpp) on every
// model; so are, on small_llama (the model those tests train), the parameters elementwise (relative 1e-5, absolute
// floor 1e-6) and their movement (≤ 1e-5). tiny-llama's own full training does not meet those two: more of its
// elements have gradients that are rounding noise, which AdamW's m/√v turns into full-size steps — measured with
// this test's checks on full training of tiny-llama (mode full, full_shard, 3 steps): at 2 ranks 6 of 803968
// parameters 1.0e-6 to 2.7e-6 from the reference, at 3 ranks a movement distance of 7.6e-5 and 3 elements past even
// a 1e-5 floor. On tiny-llama the movement bound is therefore 1e-4, from that measurement of full training (LoRA
// measured 5e-6 to 1.8e-5 there), and the elementwise count is reported, not bounded.
double movement_bound(const FinetuneCase& c) { return c.small ? 1e-5 : 1e-4; }

// Rank `index`'s chunk of `chunk` elements of a unit's trainable region taken from `model_flat`: the unit's trainable
// tensors in unit order, zero-padded — written from Note [Frozen shards]'s definition, not the executor's mapping.
std::vector<float> trainable_chunk(const runtime::ModelLayout& layout, const std::vector<std::size_t>& unit_layers,
                                   const std::vector<float>& model_flat, int index, std::size_t chunk) {
  std::vector<float> region;
  for (const std::size_t layer : unit_layers) {
    for (const runtime::TensorSlot& slot : layout.layers[layer].tensors) {
      if (!slot.trains) continue;
      const auto first = model_flat.begin() + layout.layer_offsets_elements[layer] + slot.offset_elements;
      region.insert(region.end(), first, first + slot.element_count);
    }
  }
  std::vector<float> out(chunk, 0.0f);
  for (std::size_t i = 0; i < chunk; ++i) {
    const std::size_t at = static_cast<std::size_t>(index) * chunk + i;
    if (at < region.size()) out[i] = region[at];
  }
  return out;
}

// Reduce-scatter calls and bytes one micro-batch issues, counted from the runtime layout: one per unit with a
// trainable tensor, of its trainable elements padded to the shard group (fp32) — independent of the lowering.
comm::CollectiveTally expected_reduce_scatters(const Runner& runner, int shard_group) {
  comm::CollectiveTally tally;
  for (const UnitInfo& unit : plan_units(runner.plan(), runner.model())) {
    std::int64_t trainable = 0;
    for (const std::size_t layer : unit.layers) {
      for (const runtime::TensorSlot& slot : runner.model_layout().layers[layer].tensors) {
        if (slot.trains) trainable += slot.element_count;
      }
    }
    if (trainable == 0) continue;
    tally.calls += 1;
    tally.bytes += static_cast<std::uint64_t>((trainable + shard_group - 1) / shard_group * shard_group * 4);
  }
  return tally;
}

// Note [Fine-tuning mutations]: tried by hand on "LoRA on every projection" at 2 ranks, each fails this test —
// - the optimizer step also decaying each shard's frozen part (weight decay on frozen parameters, runner_step.cpp):
//   every unit's frozen-shard memcmp fails from step 0 and the gathered base differs from the initial model;
// - gathered shards left rank after rank (finish_unshard not called after the all-gather, Note [Frozen shards]): the
//   losses differ from step 0, m and v are 1e-4 to 0.99 off in every unit, the adapters' movement 0.98 off;
// - the lowering reduce-scattering units without trainable parameters too (planner/lowering_reductions.cpp reduce's
//   `grad_elements == 0` return removed): the run stops at "unit 'root' reduced without a gradient" (the runner's
//   own check, which the count against the layout, expected_reduce_scatters, backs up).
void check_finetune(const FinetuneCase& c) {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const int size = world.size();
  const ModelSpec model = finetuned_tiny_llama(c.finetune, c.small);
  const int micro_batch = 2, seq_len = 16, steps = 3;
  TrainingConfig training = fp32_training(seq_len, micro_batch, c.global_batch > 0 ? c.global_batch * size : 0, c.ac);
  training.finetune = c.finetune;
  const Plan plan = strategy_plan(model, training, c.strategy, size);
  RunnerOptions options;
  options.seed = 5;
  Runner runner(model, plan, world, options);
  const auto data = test_data(micro_batch, seq_len);
  const int k = runner.schedule().micro_batches;
  const ReferenceRun reference = finetune_reference(model, data, steps, k, size, options.seed, options.adamw);
  const std::string label = std::string(to_string(c.finetune.mode)) + ", " + c.strategy + ", world " +
                            std::to_string(size) + (c.small ? ", small-llama" : ", tiny-llama");
  const auto& layout = runner.model_layout();

  // Each rank's frozen shards before training, to compare bit for bit after every step.
  std::vector<std::vector<float>> frozen_before;
  bool some_unit_trains_nothing = false;
  for (FlatParam* param : runner.flat_params()) {
    frozen_before.emplace_back(param->frozen_shard().begin(), param->frozen_shard().end());
    some_unit_trains_nothing = some_unit_trains_nothing || param->sizes().grad_elements == 0;
  }
  const std::vector<UnitInfo> units = plan_units(runner.plan(), runner.model());
  for (int step = 0; step < steps; ++step) {
    const StepReport report = runner.step(rank_micro_batches(data, step, k, size, world.rank()));
    const auto s = static_cast<std::size_t>(step);
    INFO(label, ", step ", step, ": loss ", report.loss, " vs reference ", reference.losses[s]);
    CHECK(close(report.loss, reference.losses[s], 1e-5));
    // Collectives: the schedule's, kind by kind; the reduce-scatters also as the layout counts them.
    const comm::CommCounters expected = runner.expected_step_collectives();
    for (std::size_t kind = 0; kind < comm::kCollectiveKinds; ++kind) {
      CHECK(report.collectives.tallies[kind].calls == expected.tallies[kind].calls);
      CHECK(report.collectives.tallies[kind].bytes == expected.tallies[kind].bytes);
    }
    if (step == 0) {
      MESSAGE(label, ", per step: all_gather ", report.collectives.calls(comm::Collective::all_gather), " calls ",
              report.collectives.bytes(comm::Collective::all_gather), " B, reduce_scatter ",
              report.collectives.calls(comm::Collective::reduce_scatter), " calls ",
              report.collectives.bytes(comm::Collective::reduce_scatter), " B, all_reduce ",
              report.collectives.calls(comm::Collective::all_reduce), " calls ",
              report.collectives.bytes(comm::Collective::all_reduce), " B (the schedule's: ",
              expected.total_calls(), " calls, ", expected.total_bytes(), " B)");
    }
    if (c.strategy == "full_shard" && size > 1) {
      const comm::CollectiveTally per_micro_batch = expected_reduce_scatters(runner, size);
      CHECK(report.collectives.calls(comm::Collective::reduce_scatter) == per_micro_batch.calls * k);
      CHECK(report.collectives.bytes(comm::Collective::reduce_scatter) == per_micro_batch.bytes * k);
    }
    std::size_t unit = 0;
    for (FlatParam* param : runner.flat_params()) {
      const std::vector<float> frozen(param->frozen_shard().begin(), param->frozen_shard().end());
      INFO(label, ", step ", step, ", unit '", param->sizes().name, "' shard ", param->shard_index());
      CHECK(frozen.size() == frozen_before[unit].size());
      // Bit for bit; an all-trainable shard has no frozen part (memcmp's pointers must not be null even for 0 bytes).
      CHECK((frozen.empty() ||
             std::memcmp(frozen.data(), frozen_before[unit].data(), frozen.size() * sizeof(float)) == 0));
      // AdamW's moments (Note [Gradient check] in test_equivalence.cpp) on the shard's trainable part.
      const std::vector<float> m(param->exp_avg().begin(), param->exp_avg().end());
      const std::vector<float> v(param->exp_avg_sq().begin(), param->exp_avg_sq().end());
      if (!m.empty()) {
        const auto& layers = units[unit].layers;
        CHECK(relative_distance(m, trainable_chunk(layout, layers, reference.exp_avg[s], param->shard_index(),
                                                   m.size())) <= 1e-5);
        CHECK(relative_distance(v, trainable_chunk(layout, layers, reference.exp_avg_sq[s], param->shard_index(),
                                                   v.size())) <= 1e-5);
      }
      ++unit;
    }
  }
  // The whole model gathered back: frozen elements bit-identical to the initial model, trainable ones as the
  // reference trained them (Note [Fine-tuning tolerance]).
  const std::vector<float> params = runner.gather_parameters();
  REQUIRE(params.size() == reference.final_params.size());
  const GatheredFinetune gathered = compare_gathered(params, reference, layout);
  INFO(label, ": ", gathered.trainable, " trainable of ", params.size(), " elements");
  CHECK(gathered.trainable < params.size());
  CHECK(gathered.frozen_changed == 0);
  MESSAGE(label, ": ‖Δp − Δp_ref‖/‖Δp_ref‖ = ", gathered.moved, ", ", gathered.trainable_mismatches,
          " trainable elements past relative 1e-5 (floor 1e-6)");
  CHECK(gathered.moved <= movement_bound(c));  // 1 when the adapters never moved
  if (c.small) CHECK(gathered.trainable_mismatches == 0);  // Note [Fine-tuning tolerance]
  if (c.finetune.uses_lora()) CHECK(some_unit_trains_nothing);  // the root: embedding, final norm, tied head
}

}  // namespace

TEST_CASE("runner: LoRA on every projection (full_shard) trains the adapters like the reference, base bit-identical") {
  check_finetune({"full_shard", every_projection()});
}

TEST_CASE("runner: LoRA on small-llama at the full-training tests' elementwise tolerance") {
  check_finetune({"full_shard", every_projection(), 0, ActivationCheckpointing::none, true});
  check_finetune({"full_shard", frozen_embedding_and_first_block(), 4, ActivationCheckpointing::full, true});
}

TEST_CASE("runner: LoRA on q_proj and v_proj (PEFT's llama default) with no_shard") {
  check_finetune({"no_shard", lora_config({})});
}

TEST_CASE("runner: LoRA with gradient accumulation (2 micro-batches) and full activation checkpointing") {
  check_finetune({"full_shard", every_projection(), 4, ActivationCheckpointing::full});
}

TEST_CASE("runner: frozen embedding and first block (--finetune frozen) train the rest like the reference") {
  check_finetune({"full_shard", frozen_embedding_and_first_block()});
}

// HSDP: the adapters' reduce-scatter in the shard group of 2, then the all-reduce across its replicas (4 ranks: 2,
// 6 ranks: 3); below 4 ranks there are no two replicas and the case skips (the np 1-3 entries exclude it).
TEST_CASE("runner: hybrid_shard:2 with LoRA trains the adapters like the reference, base bit-identical") {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 4 || size % 2 != 0) SKIP_CASE("hybrid_shard:2 needs 2+ replicas: runs at 4 and 6 ranks");
  check_finetune({"hybrid_shard:2", every_projection()});
}

// The tracked memory per category equals the schedule's for a LoRA plan, as for full training (test_accounting.cpp):
// no gradient or optimizer state for frozen parameters, gathered units of trainable and frozen parts.
TEST_CASE("runner: LoRA's tracked memory per category equals the schedule's") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const FinetuneConfig config = every_projection();
  const ModelSpec model = finetuned_tiny_llama(config);
  TrainingConfig training = fp32_training(16, 2);
  training.finetune = config;
  Runner runner(model, strategy_plan(model, training, "full_shard", world.size()), world);
  const auto data = test_data(2, 16);
  runner.step(rank_micro_batches(data, 0, 1, world.size(), world.rank()));  // warm-up step
  const StepReport report = runner.step(rank_micro_batches(data, 1, 1, world.size(), world.rank()));
  const MemoryByCategory predicted = predicted_peaks(runner.schedule());
  // The categories test_accounting.cpp compares exactly. unsharded_grads is left out as there: a full-size
  // gradient's peak also depends on when its reduce-scatter is seen to complete (with it in this list, one run of
  // this file under load failed one assertion, not reproduced in 11 reruns, its message lost).
  for (MemoryCategory category : {MemoryCategory::sharded_params, MemoryCategory::sharded_grads,
                                  MemoryCategory::optimizer_states, MemoryCategory::unsharded_params,
                                  MemoryCategory::root_unit, MemoryCategory::comm_buffers}) {
    const auto index = static_cast<std::size_t>(category);
    INFO(to_string(category), ": tracked ", report.peak_by_category[index], ", schedule ", predicted[index]);
    CHECK(report.peak_by_category[index] == predicted[index]);
  }
}

// QLoRA's 4-bit base weights and LoRA dropout are refused up front with one line naming what to plan instead.
TEST_CASE("runner: QLoRA and lora_dropout are refused with a clear message") {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  const ModelSpec base = preset_model("tiny-llama");
  FinetuneConfig qlora = every_projection();
  qlora.mode = FinetuneMode::qlora;
  FinetuneConfig dropout = every_projection();
  dropout.lora.dropout = 0.05;
  for (const FinetuneConfig& config : {qlora, dropout}) {
    const ModelSpec model = finetuned_model(base, config, FinetuneFieldNames::cli());
    TrainingConfig training = fp32_training(16, 2);
    training.finetune = config;
    const Plan plan = strategy_plan(model, training, "full_shard", world.size());
    std::string message;
    try {
      Runner runner(model, plan, world);
    } catch (const InputError& error) {
      message = error.what();
    }
    INFO(message);
    CHECK(message.find(config.mode == FinetuneMode::qlora ? "4-bit" : "lora_dropout") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

}  // namespace shardplan::runner::testing
