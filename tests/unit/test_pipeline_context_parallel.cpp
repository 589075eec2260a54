// Tests of pipeline × context parallelism in the lowering (Note [Pipeline programs] and Note [Context-parallel
// lowering]): each pipeline rank's program is one CP rank's over its stages — the ring's sends on its attention
// layers, the CP share at the stage boundary — and the pipeline's sends pair as without CP.
#include <doctest/doctest.h>

#include "context_parallel_lowering.h"
#include "lowering.h"
#include "model_presets.h"
#include "pipeline_schedule.h"
#include "tensor_parallel_view.h"

using namespace shardplan;

namespace {

// llama3.1-8b over 2 pipeline ranks (1F1B) of 4 data-parallel ranks each, 4 micro-batches of one 16k sequence,
// context parallel degree `cp` (of those 4 ranks).
struct PipelinedRing {
  ModelSpec model = preset_model("llama3.1-8b");
  Plan plan;
  ParallelDims dims;
  explicit PipelinedRing(int cp) : dims(ParallelDegrees{}, 1) {
    TrainingConfig training;
    training.seq_len = 16384;
    plan = default_plan(model, training, {}, wrap_per_block(model), 4 / cp);
    plan.grad_accumulation_steps = 4;
    plan.context_parallel.degree = cp;
    plan.pipeline = default_pipeline(model, 2, PipelineScheduleKind::one_f_one_b, 1);
    validate_plan(plan, model, 8, 8);
    dims = parallel_dims(plan, 8);
  }
  DataParallelView view() const { return data_parallel_view(plan, model, dims, 8); }
  PipelineSchedule lower() const {
    const DataParallelView data_parallel = view();
    return lower_pipeline(data_parallel.plan, data_parallel.model,
                          {data_parallel.world_size(), data_parallel.gpus_per_node, 0}, pipeline_layout(plan, dims));
  }
  // The ring sends one micro-batch's passes of `rank`'s layers make: per attention layer, forward cp − 1 K/V sends,
  // backward cp − 1 K/V and cp dK/dV sends (Note [Ring attention]).
  std::size_t ring_sends_per_micro_batch(int rank) const {
    const DataParallelView data_parallel = view();
    const PipelineRankModel held =
        pipeline_rank_model(data_parallel.plan, data_parallel.model, pipeline_layout(plan, dims), rank);
    const TrainingConfig share = context_parallel_rank_plan(plan).training;
    std::size_t sends = 0;
    for (std::size_t layer = 0; layer < held.model.layers.size(); ++layer) {
      const auto ring = layer_ring_attention(held.model, layer, share, plan.context_parallel.degree);
      if (ring) sends += static_cast<std::size_t>(2 * ring->forward_kv_ring_steps + ring->backward_grad_kv_ring_steps);
    }
    return sends;
  }
};

}  // namespace

TEST_CASE("pipeline x context parallelism: each pipeline rank runs one CP rank's share with the ring's sends") {
  const PipelinedRing split(2);
  const PipelineSchedule whole = PipelinedRing(1).lower(), ring = split.lower();
  const std::int64_t boundary_whole = std::int64_t{16384} * 4096 * 2;  // one sequence's bf16 hidden states
  REQUIRE(ring.programs.size() == 2);
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const StepSchedule& program = ring.programs[static_cast<std::size_t>(rank)];
    const StepSchedule& plain = whole.programs[static_cast<std::size_t>(rank)];
    CHECK(program.seq_len == 8192);  // the CP rank's share of each sequence
    std::size_t pipeline_sends = 0, ring_sends = 0;
    for (const Op& op : program.ops) {
      if (op.kind == OpKind::send && op.peer_stage >= 0) {
        ++pipeline_sends;
        CHECK(op.bytes == boundary_whole / 2);  // the stages pass the CP rank's rows
      } else if (op.kind == OpKind::send) {
        ++ring_sends;
        CHECK(op.group_size == 2);
      }
      if (op.kind == OpKind::recv) CHECK(op.bytes == boundary_whole / 2);
    }
    // 1F1B over 2 stages with 4 micro-batches: each rank sends once per micro-batch to its neighbour.
    CHECK(pipeline_sends == 4);
    const std::size_t per_micro_batch = split.ring_sends_per_micro_batch(rank);
    CHECK(per_micro_batch >= 16 * 4);  // at least 16 blocks of 4 sends each (cp 2)
    CHECK(ring_sends == 4 * per_micro_batch);
    // Without CP: the same pipeline sends at every row, and no ring.
    for (const Op& op : plain.ops) {
      if (op.kind == OpKind::send) CHECK(op.peer_stage >= 0);
      if (op.kind == OpKind::send) CHECK(op.bytes == boundary_whole);
    }
    // Half of each sequence: half the model FLOPs (load-balanced causal sharding halves the attention too).
    CHECK(program.model_flops_per_rank * 2 == doctest::Approx(plain.model_flops_per_rank).epsilon(1e-9));
  }
  // Every pipeline recv waits for its neighbour's send of the same micro-batch, as without CP.
  CHECK(ring.cross_dependencies.size() == whole.cross_dependencies.size());
  CHECK(ring.cross_dependencies.size() == 8);
}
