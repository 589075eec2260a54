// Tests of context parallelism in the lowering (Note [Context-parallel lowering] in
// planner/context_parallel_lowering.h): the ring's sends per step and their bytes against context_parallel.cpp's,
// the rank's share of compute and activations, FSDP over dp_shard × cp, a CP plan's JSON and torchtitan export, and
// the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "cluster.h"
#include "context_parallel_lowering.h"
#include "errors.h"
#include "export_torchtitan.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "lowering.h"
#include "model_presets.h"
#include "pass_kernels.h"
#include "plan_export.h"
#include "plan_json.h"
#include "simulator.h"

using namespace shardplan;

namespace {

// llama3-8b, one unit per block, one micro-batch of one sequence per data-parallel rank (cp ranks share it).
Plan cp_plan(const ModelSpec& model, std::int64_t seq_len, int cp, int world,
             ActivationCheckpointing checkpointing = ActivationCheckpointing::none) {
  TrainingConfig training;
  training.seq_len = seq_len;
  training.checkpointing = checkpointing;
  Plan plan = default_plan(model, training, {}, wrap_per_block(model), world / cp);
  plan.context_parallel.degree = cp;
  return plan;
}

struct RingTotals {
  std::size_t sends = 0;
  std::int64_t bytes = 0;
};
RingTotals ring_totals(const StepSchedule& schedule) {
  RingTotals totals;
  for (const Op& op : schedule.ops) {
    if (op.kind != OpKind::send) continue;
    CHECK(op.stream == StreamKind::p2p);
    ++totals.sends;
    totals.bytes += op.bytes;
  }
  return totals;
}

std::int64_t forward_activation_bytes(const StepSchedule& schedule, int layer) {
  for (const Op& op : schedule.ops) {
    if (op.kind != OpKind::forward || op.layer != layer) continue;
    std::int64_t bytes = 0;
    for (const MemoryChange& change : op.allocates) {
      if (change.category == MemoryCategory::activations) bytes += change.bytes;
    }
    return bytes;
  }
  return -1;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("context parallel lowering: the ring's sends and bytes per step are context_parallel.cpp's") {
  const ModelSpec model = preset_model("llama3-8b");
  const LoweringOptions options{8, 8, 0};
  // seq 8192 over cp 4: 2048 tokens per rank; K and V as SDPA takes them — the block's repeat_kv copied them up to
  // the 32 query heads (Note [Ring attention]) — × 128 in bf16: 2 × 2048 × 32 × 128 × 2 B = 32 MiB per ring step,
  // dK and dV in fp32 64 MiB. Per block: forward 3 K/V sends, backward 3 K/V and 4 dK/dV sends.
  const StepSchedule schedule = lower_plan(cp_plan(model, 8192, 4, 8), model, options);
  const RingTotals totals = ring_totals(schedule);
  CHECK(totals.sends == 32 * (3 + 3 + 4));
  CHECK(totals.bytes == std::int64_t{32} * (6 * (32 << 20) + 4 * (64 << 20)));
  // The same figures from context_parallel.cpp for one block.
  const auto ring = layer_ring_attention(model, 1, cp_plan(model, 8192, 4, 8).training, 4);
  REQUIRE(ring);
  CHECK(ring->kv_bytes_per_ring_step == 32 << 20);
  CHECK(ring->grad_kv_bytes_per_ring_step == 64 << 20);
  // A block that hands SDPA its 8 kv heads grouped (no repeat_kv kernel: enable_gqa) sends a quarter of that.
  ModelSpec grouped = model;
  auto& elementwise = grouped.layers[1].kernels->elementwise;
  const auto repeat = std::find_if(elementwise.begin(), elementwise.end(),
                                   [](const auto& kernel) { return kernel.name == "repeat_kv"; });
  REQUIRE(repeat != elementwise.end());
  elementwise.erase(repeat);
  const auto grouped_ring = layer_ring_attention(grouped, 1, cp_plan(model, 8192, 4, 8).training, 4);
  REQUIRE(grouped_ring);
  CHECK(grouped_ring->kv_bytes_per_ring_step == 8 << 20);
  CHECK(grouped_ring->grad_kv_bytes_per_ring_step == 16 << 20);
  CHECK(totals.bytes == 32 * (ring->forward_bytes_sent_per_layer + ring->backward_bytes_sent_per_layer));
  for (const Op& op : schedule.ops) {
    if (op.kind != OpKind::send) continue;
    CHECK(op.group_size == 4);
    CHECK_FALSE(op.group_spans_nodes);  // cp 4 × tp 1 ranks of one node
  }
  // Full recompute runs the forward's ring again: 3 more K/V sends per block.
  const StepSchedule full = lower_plan(cp_plan(model, 8192, 4, 8, ActivationCheckpointing::full), model, options);
  CHECK(ring_totals(full).sends == 32 * (3 + 3 + 3 + 4));
  // The FSDP shard group is dp_shard × cp: the whole world of 8.
  CHECK(schedule.world_size == 8);
  CHECK(schedule.parallel.cp() == 4);
  CHECK(schedule.parallel.dp_shard() == 2);
  CHECK(schedule.parallel.fsdp_shard_size() == 8);
  CHECK(schedule.seq_len == 2048);
  CHECK(schedule.tokens_per_step == 2 * 8192);  // two sequences: one per dp_shard rank
}

TEST_CASE("context parallel lowering: each attention pass carries the ring's tensor traffic, the others none") {
  // Note [Ring tensor traffic]: the lowering adds it to the pass's memory-bound bytes, beside the kernels the rank's
  // s/cp tokens give; a layer without attention (the embedding) gets none.
  const ModelSpec model = preset_model("llama3-8b");
  const Plan plan = cp_plan(model, 8192, 4, 8);
  const StepSchedule schedule = lower_plan(plan, model, {8, 8, 0});
  const Plan share = context_parallel_rank_plan(plan);
  const auto ring = layer_ring_attention(model, 1, plan.training, 4);  // the whole sequence, split 4 ways
  REQUIRE(ring);
  std::size_t checked = 0;
  for (const Op& op : schedule.ops) {
    if ((op.kind != OpKind::forward && op.kind != OpKind::backward) || op.micro_batch != 0 || !op.kernels) continue;
    const auto layer = static_cast<std::size_t>(op.layer);
    const ComputePass pass = op.kind == OpKind::forward ? ComputePass::forward : ComputePass::backward;
    const PassKernels alone = pass_kernels(model, layer, share.training, pass, ActivationCheckpointing::none);
    const double extra = op.kernels->memory_bytes - alone.memory_bytes;
    if (alone.attention.empty()) {
      CHECK(extra == 0);
    } else {
      CHECK(extra == doctest::Approx(pass == ComputePass::forward ? ring->forward_tensor_bytes
                                                                  : ring->backward_tensor_bytes));
      ++checked;
    }
  }
  CHECK(checked == 2 * 32);  // every block's forward and backward
}

TEST_CASE("context parallel lowering: cp ranks sit after tp, so the ring leaves the node when cp x tp outgrows it") {
  const ModelSpec model = preset_model("llama3-8b");
  const LoweringOptions options{16, 8, 0};  // 2 nodes of 8
  const auto spans = [&](int tp) {
    Plan plan = cp_plan(model, 8192, 4, 16);
    plan.tensor_parallel_degree = tp;
    const StepSchedule schedule = lower_plan(plan, model, options);
    CHECK(schedule.parallel.tp() == tp);
    CHECK(schedule.world_size == 16 / tp);  // FSDP over dp_shard x cp
    bool any = false, all = true;
    for (const Op& op : schedule.ops) {
      if (op.kind != OpKind::send) continue;
      any = any || op.group_spans_nodes;
      all = all && op.group_spans_nodes;
    }
    CHECK(any == all);
    return any;
  };
  CHECK_FALSE(spans(2));  // 4 x 2 = 8 ranks: one node
  CHECK(spans(4));        // 4 x 4 = 16 ranks: two nodes
}

TEST_CASE("context parallel lowering: each rank does 1/cp of the compute and keeps 1/cp of the activations") {
  const ModelSpec model = preset_model("llama3.1-8b");  // Llama 3 8B's config names 8192 positions
  const LoweringOptions options{8, 8, 0};
  const StepSchedule whole = lower_plan(cp_plan(model, 32768, 1, 8), model, options);
  const StepSchedule split = lower_plan(cp_plan(model, 32768, 2, 8), model, options);
  CHECK(ring_totals(whole).sends == 0);
  // Load-balanced sharding: each rank's 2 ring steps of (s/2)²/2 attention are half the whole sequence's s²/2.
  CHECK(split.model_flops_per_rank * 2 == doctest::Approx(whole.model_flops_per_rank).epsilon(1e-9));
  CHECK(split.hardware_flops_per_rank * 2 == doctest::Approx(whole.hardware_flops_per_rank).epsilon(1e-9));
  const std::int64_t whole_block = forward_activation_bytes(whole, 5);
  const std::int64_t split_block = forward_activation_bytes(split, 5);
  REQUIRE(whole_block > 0);
  CHECK(split_block * 2 == whole_block);
}

TEST_CASE("context parallel lowering: llama3-8b at 32k tokens on 8 H100, cp 2 against cp 1") {
  const ModelSpec model = preset_model("llama3.1-8b");  // Llama 3 8B's shape; its config names 131072 positions
  const Cluster cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  const LoweringOptions options{8, 8, profile.context_overhead_bytes};
  const auto run = [&](int cp) {
    return simulate(lower_plan(cp_plan(model, 32768, cp, 8, ActivationCheckpointing::full), model, options), profile,
                    false)
        .summary;
  };
  const SimulationSummary one = run(1), two = run(2);
  MESSAGE("cp 1: step " << one.step_time_s << " s, " << one.tokens_per_s / 8 << " tokens/s/GPU, peak "
                        << one.peak_memory_bytes / double(1 << 30) << " GiB; cp 2: step " << two.step_time_s << " s, "
                        << two.tokens_per_s / 8 << " tokens/s/GPU, peak " << two.peak_memory_bytes / double(1 << 30)
                        << " GiB");
  // cp 2 runs half the sequences (4 data-parallel ranks of one each): about half the step, never more per token.
  CHECK(two.step_time_s < one.step_time_s);
  CHECK(two.step_time_s > one.step_time_s / 2);
  CHECK(two.tokens_per_s < one.tokens_per_s);
  CHECK(two.peak_memory_bytes < one.peak_memory_bytes);
  // On NVLink a ring step's 64 MiB of K/V (2 × 16384 × 8 × 128 × 2 B) hides behind its attention step, as
  // context_parallel.cpp's per-step windows say.
  const auto ring = layer_ring_attention(model, 1, cp_plan(model, 32768, 2, 8).training, 2);
  REQUIRE(ring);
  const RingExposure exposure = ring_exposure(*ring, ring_step_compute_s(*ring, {1, 32768, 32, 8, 128}, profile, false),
                                              ring_step_compute_s(*ring, {1, 32768, 32, 8, 128}, profile, true),
                                              profile.intra_node);
  CHECK(exposure.forward_exposed_s == 0);
}

TEST_CASE("context parallel lowering: the plan JSON carries the degree, the torchtitan export writes it") {
  const ModelSpec model = preset_model("llama3.1-8b");
  Plan plan = cp_plan(model, 65536, 2, 8, ActivationCheckpointing::full);
  plan.training.precision = precision_recipe("bf16-mixed-fp32-reduce");
  const nlohmann::json document = to_json(plan, model);
  CHECK(document.at("context_parallel_degree") == 2);
  CHECK(plan_from_json(document, "test", model).context_parallel.degree == 2);
  CHECK_FALSE(to_json(cp_plan(model, 65536, 1, 8), model).contains("context_parallel_degree"));
  const ParallelDims degrees = torchtitan_degrees(plan, 8, 8);
  CHECK(degrees.cp() == 2);
  CHECK(degrees.dp_shard() == 4);
  const auto files = export_plan("torchtitan", plan, model, 8, 8);
  REQUIRE(files.size() == 1);
  const std::string& toml = files[0].contents;
  for (const char* line : {"context_parallel_degree = 2\n", "data_parallel_shard_degree = 4\n",
                           "global_batch_size = 4\n", "seq_len = 65536\n"}) {
    CAPTURE(line);
    CHECK(contains(toml, line));
  }
  CHECK_THROWS_AS(export_plan("fsdp2", plan, model, 8, 8), InputError);
}

TEST_CASE("context parallel lowering: refusals name the degree and why") {
  const ModelSpec model = preset_model("llama3-8b");
  const LoweringOptions options{8, 8, 0};
  CHECK_THROWS_WITH_AS(lower_plan(cp_plan(model, 8196, 4, 8), model, options),
                       doctest::Contains("multiple of 2 x 4 = 8"), InputError);
  Plan eager = cp_plan(model, 8192, 2, 8);
  eager.training.flash_attention = false;
  CHECK_THROWS_AS(lower_plan(eager, model, options), InputError);
  Plan three = cp_plan(model, 8192, 1, 8);
  three.context_parallel.degree = 3;  // 3 does not divide the 8 ranks
  CHECK_THROWS_AS(lower_plan(three, model, options), InputError);
}
