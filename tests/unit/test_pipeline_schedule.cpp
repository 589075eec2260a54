// Tests of the pipeline programs (Note [Pipeline programs]) and their simulation (Note [Pipeline placement]): the
// simulated step against the order's replay in the same op times, micro-batches in flight per stage as 1F1B and
// GPipe keep them, the interleaved schedule's smaller bubble, FSDP's ops under PP, and the refusals.
#include <doctest/doctest.h>

#include <algorithm>

#include "errors.h"
#include "model_presets.h"
#include "op_durations.h"
#include "pipeline_schedule.h"
#include "pipeline_simulator.h"
#include "schedule_fixtures.h"
#include "unit_layout.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

// `blocks` toy blocks cut into equal stages of pp × v; `micro_batches` per step; 2 data-parallel ranks per stage.
struct Pipeline {
  ModelSpec model;
  Plan plan;
  LoweringOptions options = toy_options(2);
  PipelineLayout layout;
  Pipeline(int blocks, PipelineScheduleKind schedule, int pp, int v, int micro_batches) : model(toy_blocks(blocks)) {
    plan = toy_plan(model, 2);
    plan.grad_accumulation_steps = micro_batches;
    layout.schedule = schedule;
    layout.degree = pp;
    ParallelDegrees degrees;
    degrees.pp = pp;
    layout.dims = ParallelDims(degrees, 2 * pp);  // 2 data-parallel ranks per stage
    layout.stages_per_rank = v;
    const int stages = pp * v;
    const std::size_t per_stage = static_cast<std::size_t>(blocks / stages);
    for (int stage = 0; stage < stages; ++stage) {
      const auto begin = static_cast<std::size_t>(stage) * per_stage;
      layout.stages.push_back({begin, begin + per_stage});
    }
  }
  PipelineSchedule lower() const { return lower_pipeline(plan, model, options, layout); }
  // The hidden state one micro-batch passes between stages (Note [Pipeline programs]; no TP here).
  std::int64_t boundary_bytes() const {
    return plan.training.micro_batch * plan.training.seq_len * model.hidden_size *
           plan.training.precision.param_compute_bytes;
  }
};

// One stage's forward and backward of one micro-batch, from the program's own op durations.
std::pair<double, double> stage_pass_s(const PipelineSchedule& pipeline, const HardwareProfile& profile) {
  const StepSchedule& program = pipeline.programs.front();
  const std::vector<double> base_s = base_durations_s(program, profile);
  double forward_s = 0, backward_s = 0;
  for (const Op& op : program.ops) {
    if (op.micro_batch != 0 || op.stage != 0) continue;
    if (op.kind == OpKind::forward) forward_s += base_s[static_cast<std::size_t>(op.id)];
    if (op.kind == OpKind::backward || op.kind == OpKind::recompute) {
      backward_s += base_s[static_cast<std::size_t>(op.id)];
    }
  }
  return {forward_s, backward_s};
}

}  // namespace

TEST_CASE("pipeline programs: the simulated step is the order's replay in the same pass times, for GPipe and 1F1B") {
  const HardwareProfile profile = compute_bound_profile();
  for (const PipelineScheduleKind kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b}) {
    CAPTURE(to_string(kind));
    const Pipeline setup(8, kind, 4, 1, 8);
    const PipelineSchedule pipeline = setup.lower();
    REQUIRE(pipeline.programs.size() == 4);
    const auto [forward_s, backward_s] = stage_pass_s(pipeline, profile);
    REQUIRE(forward_s > 0);
    const PipelineSimulation simulated = simulate_pipeline(pipeline, profile);
    const PipelineReplay replay = replay_pipeline_order(pipeline.order, forward_s, backward_s, 0.0);
    // (M + pp − 1)(tF + tB): 11 × 24 ms; the optimizer step at HBM speed adds nothing measurable.
    CHECK(replay.makespan == doctest::Approx(11 * (forward_s + backward_s)));
    CHECK(simulated.step_time_s == doctest::Approx(replay.makespan).epsilon(1e-6));
    for (const PipelineRankSummary& rank : simulated.ranks) {
      CHECK(rank.bubble_fraction == doctest::Approx(3.0 / 11.0).epsilon(1e-6));
    }
  }
}

TEST_CASE("pipeline programs: 1F1B keeps pp - stage micro-batches in flight, GPipe all of them, and less memory") {
  const HardwareProfile profile = compute_bound_profile();
  const PipelineSimulation gpipe = simulate_pipeline(Pipeline(8, PipelineScheduleKind::gpipe, 4, 1, 8).lower(), profile);
  const PipelineSimulation one_f_one_b =
      simulate_pipeline(Pipeline(8, PipelineScheduleKind::one_f_one_b, 4, 1, 8).lower(), profile);
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    const auto at = static_cast<std::size_t>(rank);
    CHECK(gpipe.ranks[at].peak_in_flight_micro_batches == 8);
    CHECK(one_f_one_b.ranks[at].peak_in_flight_micro_batches == 4 - rank);
    CHECK(one_f_one_b.ranks[at].peak_memory_bytes < gpipe.ranks[at].peak_memory_bytes);
  }
  // Stage 0 keeps 4 micro-batches' activations under 1F1B, the last stage 1: their activation peaks differ by 3
  // micro-batches' worth, the same stage's parameters and states aside.
  CHECK(one_f_one_b.ranks[0].peak_memory_bytes > one_f_one_b.ranks[3].peak_memory_bytes);
}

TEST_CASE("pipeline programs: interleaved 1F1B's virtual stages cut the bubble, as published") {
  const HardwareProfile profile = compute_bound_profile();
  const PipelineSimulation plain =
      simulate_pipeline(Pipeline(16, PipelineScheduleKind::one_f_one_b, 4, 1, 8).lower(), profile);
  const Pipeline interleaved_setup(16, PipelineScheduleKind::interleaved_1f1b, 4, 2, 8);
  const PipelineSchedule interleaved_pipeline = interleaved_setup.lower();
  const PipelineSimulation interleaved = simulate_pipeline(interleaved_pipeline, profile);
  CHECK(interleaved.step_time_s < plain.step_time_s);
  CHECK(interleaved.bubble_fraction < plain.bubble_fraction);
  // Against the order's replay with a virtual stage's pass times (half a rank's layers each).
  const auto [forward_s, backward_s] = stage_pass_s(interleaved_pipeline, profile);
  const PipelineReplay replay = replay_pipeline_order(interleaved_pipeline.order, forward_s, backward_s, 0.0);
  CHECK(interleaved.step_time_s == doctest::Approx(replay.makespan).epsilon(1e-6));
}

TEST_CASE("pipeline programs: FSDP under PP gathers each unit once, reduces it once, and pairs every send") {
  const Pipeline setup(8, PipelineScheduleKind::one_f_one_b, 2, 1, 4);
  const PipelineSchedule pipeline = setup.lower();
  int sends = 0;
  for (const StepSchedule& program : pipeline.programs) {
    // 4 units per stage (one per block; the root holds no layer): each gathered once, kept over the 4 micro-batches.
    CHECK(program.count(OpKind::all_gather) == 4);
    CHECK(program.count(OpKind::reduce_scatter) == 4);
    CHECK(program.count(OpKind::free_unsharded) == 4);
    CHECK(program.count(OpKind::optimizer_step) == 1);
    for (const Op& op : program.ops) {
      if (op.kind == OpKind::send) {
        ++sends;
        CHECK(op.stream == StreamKind::p2p);
        CHECK(op.bytes == setup.plan.training.micro_batch * setup.plan.training.seq_len * setup.model.hidden_size *
                              setup.plan.training.precision.param_compute_bytes);
      }
      if (op.kind == OpKind::reduce_scatter) CHECK(op.micro_batch == 3);  // the last micro-batch's backward
    }
  }
  // Forward activations 0 → 1 and gradients 1 → 0, one per micro-batch each way; each recv waits for one of them.
  CHECK(sends == 8);
  CHECK(pipeline.cross_dependencies.size() == 8);
}

TEST_CASE("pipeline programs: a unit across a stage boundary, bad stage ranges, other degrees and ties are refused") {
  Pipeline crossing(8, PipelineScheduleKind::one_f_one_b, 2, 1, 2);
  crossing.plan = plan_with_units(crossing.model, crossing.plan, {{0, 2}, {2, 6}, {6, 8}});
  CHECK_THROWS_WITH_AS(crossing.lower(), doctest::Contains("cross a pipeline stage boundary"), InputError);
  Pipeline short_stages(8, PipelineScheduleKind::one_f_one_b, 2, 1, 2);
  short_stages.layout.stages.back().end = 7;
  CHECK_THROWS_WITH_AS(short_stages.lower(), doctest::Contains("pipeline.stages"), InputError);
  Pipeline other_degrees(8, PipelineScheduleKind::one_f_one_b, 2, 1, 2);
  other_degrees.layout.dims = ParallelDims(ParallelDegrees{}, 4);  // pp 1 against the layout's 2
  CHECK_THROWS_WITH_AS(other_degrees.lower(), doctest::Contains("expected its degree 2"), InputError);
  // Note [Tied layers under a pipeline]: a tie is refused by name, before any rank's model is cut from the stages
  // (where the tie's layer index would name another layer of the rank's model).
  Pipeline tied(8, PipelineScheduleKind::one_f_one_b, 2, 1, 2);
  tied.model.layers.back().tied_to_layer = 0;
  CHECK_THROWS_WITH_AS(tied.lower(), doctest::Contains("tied embeddings"), InputError);
  const std::string tie_text = "shares its weight with '" + tied.model.layers.front().name + "'";
  CHECK_THROWS_WITH_AS(pipeline_rank_model(tied.plan, tied.model, tied.layout, 1), doctest::Contains(tie_text.c_str()),
                       InputError);
  CHECK(pipeline_tie(preset_model("llama3.2-1b")) ==
        "layer 'lm_head' shares its weight with 'model.embed_tokens' (tied embeddings)");
  CHECK(pipeline_tie(preset_model("llama3-8b")).empty());
}

// torchtitan's default split (generate_llm_fqn_per_model_part, first and last stage one block lighter for the
// embedding and the head): 405B's 126 blocks over 8 stages are 15, 16 × 6, 15, the embedding on the first stage and
// the norm and head on the last.
TEST_CASE("pipeline programs: the default pipeline is torchtitan's block split as layer ranges") {
  const ModelSpec model = preset_model("llama3.1-405b");
  const PipelinePolicy pipeline = default_pipeline(model, 8, PipelineScheduleKind::one_f_one_b, 1);
  REQUIRE(pipeline.stages.size() == 8);
  CHECK(pipeline.stages.front().begin == 0);
  CHECK(pipeline.stages.front().end == 16);  // the embedding and blocks 0-14
  CHECK(pipeline.stages[1].end - pipeline.stages[1].begin == 16);
  CHECK(pipeline.stages.back().end == model.layers.size());
  for (std::size_t stage = 1; stage < pipeline.stages.size(); ++stage) {
    CHECK(pipeline.stages[stage].begin == pipeline.stages[stage - 1].end);
  }
  // 15 blocks and whatever follows the last block (final norm, head).
  std::size_t blocks = 0;
  for (std::size_t layer = pipeline.stages.back().begin; layer < pipeline.stages.back().end; ++layer) {
    blocks += model.layers[layer].kind == LayerKind::transformer_block ? 1 : 0;
  }
  CHECK(blocks == 15);
  CHECK_THROWS_WITH_AS(default_pipeline(toy_blocks(2), 8, PipelineScheduleKind::one_f_one_b, 1),
                       doctest::Contains("--pipeline-parallel"), InputError);
}

TEST_CASE("pipeline programs: each rank's layers keep their own checkpointing, and its program allocates by it") {
  // Full AC on every other block, so a rank reading the whole model's list by its own layer indices (the rank's
  // first layer taking the whole model's first layer's mode) gets a different mode somewhere.
  Pipeline setup(8, PipelineScheduleKind::one_f_one_b, 2, 1, 4);
  for (std::size_t layer = 0; layer < setup.model.layers.size(); ++layer) {
    setup.plan.layer_checkpointing[layer] =
        layer % 2 == 0 ? ActivationCheckpointing::full : ActivationCheckpointing::none;
  }
  const PipelineSchedule pipeline = setup.lower();
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const PipelineRankModel held = pipeline_rank_model(setup.plan, setup.model, setup.layout, rank);
    REQUIRE(held.plan.layer_checkpointing.size() == held.model.layers.size());
    for (std::size_t layer = 0; layer < held.model.layers.size(); ++layer) {
      CHECK(held.plan.layer_checkpointing[layer] == setup.plan.layer_checkpointing[held.whole_layers[layer]]);
    }
    // The program's forward of each held layer keeps that layer's activations under its own mode (every block differs
    // between the modes here) — less, on the second stage's first layer, the input its receive buffer holds, and
    // more, on the first stage's last layer, the output its forward cache holds (Note [Pipeline buffers]).
    const std::int64_t boundary = setup.boundary_bytes();
    REQUIRE(boundary > 0);
    const StepSchedule& program = pipeline.programs.at(static_cast<std::size_t>(rank));
    std::size_t checked = 0;
    for (const Op& op : program.ops) {
      if (op.kind != OpKind::forward || op.micro_batch != 0 || op.layer < 0) continue;
      const auto layer = static_cast<std::size_t>(op.layer);
      const std::int64_t kept = kept_activation_bytes(held.model, held.plan.training, layer,
                                                      setup.plan.layer_checkpointing[held.whole_layers[layer]]);
      // What the forward keeps: its allocations less what it frees at its end (Note [Workspaces]).
      std::int64_t net = 0;
      for (const auto& change : op.allocates) net += change.bytes;
      for (const auto& change : op.frees) net -= change.bytes;
      std::int64_t expected = kept;
      if (rank == 1 && layer == 0) expected -= std::min(kept, boundary);
      if (rank == 0 && layer + 1 == held.model.layers.size()) expected += boundary;
      CHECK(net == expected);
      ++checked;
    }
    CHECK(checked == held.model.layers.size());
  }
}

TEST_CASE("pipeline programs: the receive buffers of every micro-batch are kept, and each stage output until its "
          "backward") {
  // Note [Pipeline buffers]: 4 stages on 2 ranks (interleaved, v = 2), 4 micro-batches. Rank 0 holds stages 0 and 2,
  // rank 1 stages 1 and 3: three receiving stages for activations (1, 2, 3) and three for gradients (0, 1, 2).
  Pipeline setup(8, PipelineScheduleKind::interleaved_1f1b, 2, 2, 4);
  const PipelineSchedule pipeline = setup.lower();
  const std::int64_t boundary = setup.boundary_bytes();
  const auto comm = static_cast<std::size_t>(MemoryCategory::comm_buffers);
  // Without pipelining the same persistent comm buffers are 0: whatever a program adds is the receive buffers.
  CHECK(lower_plan(setup.plan, setup.model, setup.options).persistent[comm] == 0);
  // Rank 0: stage 0 receives gradients, stage 2 activations and gradients; rank 1: stage 1 both, stage 3 activations.
  CHECK(pipeline.programs.at(0).persistent[comm] == 3 * 4 * boundary);
  CHECK(pipeline.programs.at(1).persistent[comm] == 3 * 4 * boundary);
  // Each stage output but the last stage's is allocated by its stage's forward and freed by that micro-batch's
  // backward of the same stage: per program, the boundary bytes outstanding return to 0 at the step's end.
  for (const StepSchedule& program : pipeline.programs) {
    std::int64_t activations = 0;
    for (const Op& op : program.ops) {
      for (const auto& change : op.allocates) {
        if (change.category == MemoryCategory::activations) activations += change.bytes;
      }
      for (const auto& change : op.frees) {
        if (change.category == MemoryCategory::activations) activations -= change.bytes;
      }
    }
    CHECK(activations == 0);
  }
}

TEST_CASE("pipeline programs: the last stage keeps every micro-batch's output until the step returns it") {
  // Note [Pipeline buffers]: against the same pipeline of a model without a vocabulary (no output kept), the program
  // holding the last stage differs by the output on each forward of the head and by one release of all of them, a
  // wait of the head's layer after every pass, on the compute stream's last op (FSDP2's final reduce-scatter wait);
  // the other rank's program does not differ.
  for (const auto& [schedule, v] : {std::pair{PipelineScheduleKind::one_f_one_b, 1},
                                    std::pair{PipelineScheduleKind::interleaved_1f1b, 2}}) {
    CAPTURE(std::string(to_string(schedule)));
    Pipeline without(8, schedule, 2, v, 4);
    Pipeline with = without;
    with.model.vocab_size = 1000;
    const std::int64_t output = with.plan.training.micro_batch * with.plan.training.seq_len * 1000 *
                                with.plan.training.precision.param_compute_bytes;
    const PipelineSchedule kept = with.lower(), plain = without.lower();
    const auto net_activations = [](const Op& op) {
      std::int64_t net = 0;
      for (const auto& change : op.allocates) net += change.category == MemoryCategory::activations ? change.bytes : 0;
      for (const auto& change : op.frees) net -= change.category == MemoryCategory::activations ? change.bytes : 0;
      return net;
    };
    CHECK(kept.programs.at(0).ops.size() == plain.programs.at(0).ops.size());
    const StepSchedule& last_rank = kept.programs.at(1);
    const StepSchedule& last_rank_plain = plain.programs.at(1);
    REQUIRE(last_rank.ops.size() == last_rank_plain.ops.size() + 1);  // the release
    const std::size_t held_layers = pipeline_rank_model(with.plan, with.model, with.layout, 1).model.layers.size();
    const int head = static_cast<int>(held_layers) - 1;
    int heads = 0, release = -1, last_pass = -1, last_compute = -1;
    for (std::size_t id = 0, plain_id = 0; id < last_rank.ops.size(); ++id) {
      const Op& op = last_rank.ops[id];
      if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::recompute) {
        last_pass = static_cast<int>(id);
      }
      if (op.kind == OpKind::wait && !op.frees.empty()) {
        CHECK(op.deps == std::vector<int>{last_compute});
        CHECK(release < 0);
        release = static_cast<int>(id);
        CHECK(op.layer == head);
        CHECK(op.stage == 2 * v - 1);
        CHECK(net_activations(op) == -4 * output);
        continue;
      }
      if (op.stream == StreamKind::compute) last_compute = static_cast<int>(id);
      const std::int64_t extra = net_activations(op) - net_activations(last_rank_plain.ops[plain_id++]);
      const bool head_forward = op.kind == OpKind::forward && op.layer == head;
      heads += head_forward ? 1 : 0;
      CHECK(extra == (head_forward ? output : 0));
    }
    CHECK(heads == 4);
    CHECK(release > last_pass);  // after every pass of the rank
    CHECK(last_compute >= last_pass);
  }
}
