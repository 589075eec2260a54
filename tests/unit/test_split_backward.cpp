// Tests of the split backward of zero-bubble pipelines (Notes [Split backward] and [Split backward lowering]): the
// two parts' kernels sum to the whole backward, the weight part holds exactly the weight gradients, the zero-bubble
// programs replay their order and cut 1F1B's bubble, the saved activations stay until the weight part, gradients
// are reduced at the last one, and a checkpointed layer's weight part recomputes it once per weight group.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "errors.h"
#include "finetune_apply.h"
#include "model_presets.h"
#include "op_durations.h"
#include "pass_kernels.h"
#include "pipeline_schedule.h"
#include "pipeline_simulator.h"
#include "schedule_fixtures.h"
#include "simulator.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

// `blocks` toy blocks in pp × v equal stages, 2 data-parallel ranks per stage.
PipelineSchedule toy_pipeline(PipelineScheduleKind kind, int blocks, int pp, int v, int micro_batches,
                              ActivationCheckpointing checkpointing = ActivationCheckpointing::none,
                              bool compile = false) {
  const ModelSpec model = toy_blocks(blocks);
  Plan plan = toy_plan(model, 2);
  plan.training.torch_compile = compile;
  plan.grad_accumulation_steps = micro_batches;
  plan.layer_checkpointing.assign(model.layers.size(), checkpointing);
  PipelineLayout layout;
  layout.schedule = kind;
  layout.degree = pp;
  layout.stages_per_rank = v;
  ParallelDegrees degrees;
  degrees.pp = pp;
  layout.dims = ParallelDims(degrees, 2 * pp);
  const std::size_t per_stage = static_cast<std::size_t>(blocks / (pp * v));
  for (int stage = 0; stage < pp * v; ++stage) {
    const auto begin = static_cast<std::size_t>(stage) * per_stage;
    layout.stages.push_back({begin, begin + per_stage});
  }
  return lower_pipeline(plan, model, toy_options(2), layout);
}

// Stage 0's micro-batch 0 time of each of `kinds` (recompute ops counted with the part they precede).
double stage_time_s(const PipelineSchedule& pipeline, const HardwareProfile& profile, std::vector<OpKind> kinds) {
  const StepSchedule& program = pipeline.programs.front();
  const std::vector<double> base_s = base_durations_s(program, profile);
  double seconds = 0;
  for (const Op& op : program.ops) {
    if (op.micro_batch != 0 || op.stage != 0) continue;
    if (std::find(kinds.begin(), kinds.end(), op.kind) == kinds.end()) continue;
    seconds += base_s[static_cast<std::size_t>(op.id)];
  }
  return seconds;
}

}  // namespace

TEST_CASE("split backward: the input and weight parts sum to the whole backward; the weight part is the dW GEMMs") {
  TrainingConfig training;
  training.seq_len = 2048;
  training.precision = precision_recipe("fp8-tensorwise");
  const ModelSpec full = preset_model("llama3-8b");
  TrainingConfig lora = training;
  lora.precision = precision_recipe("bf16-mixed");
  lora.finetune.mode = FinetuneMode::lora;
  lora.finetune.lora.r = 16;
  lora.finetune.lora.target_modules = {"q_proj", "v_proj"};
  const ModelSpec adapted = finetuned_model(full, lora.finetune, FinetuneFieldNames::cli());
  struct Case {
    const char* name;
    const ModelSpec* model;
    const TrainingConfig* training;
    std::size_t weight_gemms;  // dW GEMMs: trainable projections + two per adapter
  };
  for (const Case& c : {Case{"full, float8", &full, &training, 7}, Case{"LoRA r16 on q, v", &adapted, &lora, 4}}) {
    CAPTURE(c.name);
    const auto kernels = [&](ComputePass pass) {
      return pass_kernels(*c.model, 1, *c.training, pass, ActivationCheckpointing::none);
    };
    const PassKernels whole = kernels(ComputePass::backward);
    const PassKernels input = kernels(ComputePass::backward_input);
    const PassKernels weight = kernels(ComputePass::backward_weight);
    CHECK(input.flops() + weight.flops() == doctest::Approx(whole.flops()));
    CHECK(input.gemms.size() + weight.gemms.size() == whole.gemms.size());
    CHECK(input.memory_bytes + weight.memory_bytes == doctest::Approx(whole.memory_bytes));
    CHECK(input.attention == whole.attention);
    CHECK(input.collectives == whole.collectives);
    CHECK(weight.gemms.size() == c.weight_gemms);
    CHECK(weight.attention.empty());
    CHECK(weight.memory_bytes == 0);
    // Each dW GEMM reduces over the tokens: its k is the micro-batch's.
    for (const GemmCall& gemm : weight.gemms) CHECK(gemm.k == c.training->tokens_per_micro_batch(c.model->layers[1]));
  }
}

TEST_CASE("split backward: zero-bubble programs replay their order and cut 1F1B's bubble at the same work") {
  const HardwareProfile profile = compute_bound_profile();
  const PipelineSchedule one_f_one_b = toy_pipeline(PipelineScheduleKind::one_f_one_b, 8, 4, 1, 8);
  const PipelineSchedule zero_bubble = toy_pipeline(PipelineScheduleKind::interleaved_zero_bubble, 8, 4, 1, 8);
  const PipelineSimulation plain = simulate_pipeline(one_f_one_b, profile);
  const PipelineSimulation split = simulate_pipeline(zero_bubble, profile);
  const double forward_s = stage_time_s(zero_bubble, profile, {OpKind::forward});
  const double input_s = stage_time_s(zero_bubble, profile, {OpKind::backward_input});
  const double weight_s = stage_time_s(zero_bubble, profile, {OpKind::backward_weight});
  REQUIRE(weight_s > 0);
  CHECK(input_s + weight_s == doctest::Approx(stage_time_s(one_f_one_b, profile, {OpKind::backward})));
  const PipelineReplay replay = replay_pipeline_order(zero_bubble.order, forward_s, input_s, weight_s);
  CHECK(split.step_time_s == doctest::Approx(replay.makespan).epsilon(1e-6));
  CHECK(split.step_time_s < plain.step_time_s);
  CHECK(split.bubble_fraction < plain.bubble_fraction);
  for (std::size_t rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    const StepSchedule& program = zero_bubble.programs[rank];
    CHECK(program.model_flops_per_rank == doctest::Approx(one_f_one_b.programs[rank].model_flops_per_rank));
    CHECK(program.count(OpKind::backward) == 0);
    CHECK(program.count(OpKind::backward_input) == program.count(OpKind::backward_weight));
    CHECK(split.ranks[rank].peak_in_flight_micro_batches ==
          replay.peak_in_flight_by_stage[rank]);  // one stage per rank
    // Gradients reduced once per unit, after the last micro-batch's weight part of its layers.
    CHECK(program.count(OpKind::reduce_scatter) == 2);
    int last_weight = -1;
    for (const Op& op : program.ops) {
      if (op.kind == OpKind::backward_weight && op.micro_batch == 7) last_weight = op.id;
      if (op.kind == OpKind::reduce_scatter) {
        CHECK(op.micro_batch == 7);
        CHECK(last_weight >= 0);
      }
    }
  }
}

TEST_CASE("split backward: the saved activations live until the weight part, which frees them with kept gradients") {
  const PipelineSchedule zero_bubble = toy_pipeline(PipelineScheduleKind::interleaved_zero_bubble, 8, 2, 1, 4);
  const StepSchedule& program = zero_bubble.programs.front();
  std::int64_t allocated = 0, freed = 0;
  for (const Op& op : program.ops) {
    std::int64_t op_freed = 0;
    for (const MemoryChange& change : op.allocates) {
      if (change.category == MemoryCategory::activations) allocated += change.bytes;
    }
    for (const MemoryChange& change : op.frees) {
      if (change.category == MemoryCategory::activations) op_freed += change.bytes;
    }
    freed += op_freed;
    // The input part frees no saved activation (the graph is retained): without checkpointing and workspaces
    // nothing; the weight part frees what the forward kept.
    if (op.kind == OpKind::backward_input && op.stage == 0 && op.layer != 3) CHECK(op_freed == 0);
    if (op.kind == OpKind::backward_weight) CHECK(op_freed > 0);
  }
  CHECK(allocated == freed);  // every micro-batch's activations and kept gradients are gone by the step's end
  // And the peak is above 1F1B's: the same in-flight micro-batches, each holding its activations longer.
  const HardwareProfile profile = compute_bound_profile();
  const PipelineSimulation plain =
      simulate_pipeline(toy_pipeline(PipelineScheduleKind::one_f_one_b, 8, 2, 1, 4), profile);
  const PipelineSimulation split = simulate_pipeline(zero_bubble, profile);
  CHECK(split.ranks.back().peak_memory_bytes > plain.ranks.back().peak_memory_bytes);
}

TEST_CASE("split backward: under checkpointing the weight part recomputes each layer once per weight group") {
  const PipelineSchedule zero_bubble = toy_pipeline(PipelineScheduleKind::interleaved_zero_bubble, 8, 2, 1, 2,
                                                    ActivationCheckpointing::full);
  const PipelineSchedule interleaved =
      toy_pipeline(PipelineScheduleKind::one_f_one_b, 8, 2, 1, 2, ActivationCheckpointing::full);
  const ModelSpec model = toy_blocks(8);
  const std::size_t groups = effective_kernel_spec(model, model.layers.front()).projections.size();
  REQUIRE(groups > 0);
  for (std::size_t rank = 0; rank < 2; ++rank) {
    const StepSchedule& split = zero_bubble.programs[rank];
    const StepSchedule& whole = interleaved.programs[rank];
    // 4 layers × 2 micro-batches: one recompute before each input part, `groups` in each weight part.
    CHECK(whole.count(OpKind::recompute) == 8);
    CHECK(split.count(OpKind::recompute) == 8 * (1 + groups));
    // Hardware FLOPs grow by the extra recomputes, model FLOPs do not.
    CHECK(split.model_flops_per_rank == doctest::Approx(whole.model_flops_per_rank));
    CHECK(split.hardware_flops_per_rank > whole.hardware_flops_per_rank);
  }
}

TEST_CASE("split backward: refused with torch.compile, as torchtitan does not run it so") {
  CHECK_THROWS_WITH_AS(toy_pipeline(PipelineScheduleKind::interleaved_zero_bubble, 8, 2, 1, 2,
                                    ActivationCheckpointing::none, true),
                       doctest::Contains("without --compile"), InputError);
  CHECK_NOTHROW(toy_pipeline(PipelineScheduleKind::interleaved_1f1b, 8, 2, 2, 2, ActivationCheckpointing::none, true));
}
