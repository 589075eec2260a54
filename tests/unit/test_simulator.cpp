// Tests of the simulator against timelines and memory peaks computed by hand (toy schedules, and llama3-8b's peak).
#include <doctest/doctest.h>

#include "chrome_trace.h"
#include "compute_cost.h"
#include "errors.h"
#include "estimate.h"
#include "hardware_profile.h"
#include "html_report.h"
#include "model_presets.h"
#include "schedule_fixtures.h"
#include "simulator.h"
#include "step_analysis.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

constexpr double ms = 1e-3;

// The start of the n-th op of `kind` for `unit` (in schedule order).
double start_of(const SimulationResult& result, const StepSchedule& schedule, OpKind kind, int unit, int nth = 0) {
  for (const auto& event : result.timeline.events) {
    const Op& op = schedule.ops[static_cast<std::size_t>(event.op_id)];
    if (op.kind == kind && op.unit == unit && nth-- == 0) return event.start_s;
  }
  FAIL("no such op");
  return -1;
}

// Optimizer step of two 500-element fp32 AdamW shards: 1000 × (2·4 + 4 + 2·8) bytes at 1e15 B/s.
constexpr double kOptimizerS = 1000.0 * 28.0 / 1e15;

// Two blocks on 2 ranks without prefetch: every op is on the critical path, so times and host overheads add up.
StepSchedule unprefetched_toy_schedule() {
  const ModelSpec model = toy_blocks(2);
  Plan plan = toy_plan(model, 2);
  for (auto& unit : plan.units) unit.forward_prefetch = unit.backward_prefetch = {};
  return lower_plan(plan, model, toy_options(2));
}

// A host-overhead key of the profile JSON: written from `profile`, read back by --profile, refused when negative.
void check_profile_key(const HardwareProfile& profile, const char* key, double value,
                       double HardwareProfile::*field) {
  const nlohmann::json document = {{"schema", "shardplan.profile/v1"}, {key, value}};
  CHECK(to_json(profile).at(key).get<double>() == doctest::Approx(value));
  CHECK(apply_profile_json(HardwareProfile{}, document, "p.json").*field == doctest::Approx(value));
  nlohmann::json bad = document;
  bad[key] = -1;
  CHECK_THROWS_AS(apply_profile_json(HardwareProfile{}, bad, "p.json"), InputError);
}

}  // namespace

TEST_CASE("simulator: 2 units, no prefetch — the step is the serial sum") {
  const StepSchedule schedule = unprefetched_toy_schedule();
  const SimulationResult result = simulate(schedule, round_profile());
  // Forward: AG 2 + fwd 4 per unit; backward: AG 2 + bwd 8 per unit; the last reduce-scatter (2) is exposed, the
  // first overlaps the next unit's all-gather. 12 + 20 + 2 = 34 ms.
  CHECK(result.summary.step_time_s == doctest::Approx(34 * ms + kOptimizerS));
  CHECK(result.summary.compute_time_s == doctest::Approx(24 * ms + kOptimizerS));
  CHECK(result.summary.exposed_comm_s == doctest::Approx(10 * ms));
  CHECK(start_of(result, schedule, OpKind::all_gather, 2) == doctest::Approx(6 * ms));  // after unit 1's forward
}

TEST_CASE("simulator: 2 units, one-ahead prefetch — exposed communication is exactly the uncovered part") {
  const ModelSpec model = toy_blocks(2);
  const Plan plan = toy_plan(model, 2);
  const StepSchedule schedule = lower_plan(plan, model, toy_options(2));
  const SimulationResult result = simulate(schedule, round_profile());
  // Forward: AG1 0–2 (exposed), AG2 2–4 under fwd1 2–6, fwd2 6–10. Backward: AG2 10–12 (exposed), AG1 12–14 under
  // bwd2 12–20, RS2 20–22 under bwd1 20–28, RS1 28–30 (exposed). Uncovered: 2 + 2 + 2 = 6 ms of 30.
  CHECK(result.summary.step_time_s == doctest::Approx(30 * ms + kOptimizerS));
  CHECK(result.summary.exposed_comm_s == doctest::Approx(6 * ms));
  CHECK(start_of(result, schedule, OpKind::all_gather, 2) == doctest::Approx(2 * ms));
  CHECK(start_of(result, schedule, OpKind::all_gather, 1, 1) == doctest::Approx(12 * ms));  // backward prefetch
  CHECK(start_of(result, schedule, OpKind::reduce_scatter, 2) == doctest::Approx(20 * ms));
}

TEST_CASE("simulator: 3 units — the rate limiter delays the third all-gather") {
  const ModelSpec model = toy_blocks(3);
  Plan plan = toy_plan(model, 2);
  plan.units[1].forward_prefetch = {2, 3};  // unit 1 asks for two units ahead
  plan.units[2].forward_prefetch = {};
  plan.max_inflight_all_gathers = 2;
  StepSchedule schedule = lower_plan(plan, model, toy_options(2));
  SimulationResult limited = simulate(schedule, round_profile());
  // AG1 0–2, AG2 2–4; AG3 must wait for unit 1's free at the end of its forward (2 + 4 = 6 ms).
  CHECK(start_of(limited, schedule, OpKind::all_gather, 3) == doctest::Approx(6 * ms));
  plan.max_inflight_all_gathers = 0;  // unlimited: AG3 follows AG2 on the stream
  schedule = lower_plan(plan, model, toy_options(2));
  const SimulationResult unlimited = simulate(schedule, round_profile());
  CHECK(start_of(unlimited, schedule, OpKind::all_gather, 3) == doctest::Approx(4 * ms));
  // During forward (before 14 ms) three units are gathered at once without the limiter, two with it.
  const auto forward_gathered = [](const SimulationResult& result) {
    long long most = 0;
    for (const auto& sample : result.timeline.memory) {
      if (sample.time_s < 14 * ms) {
        most = std::max(most, sample.bytes[static_cast<std::size_t>(MemoryCategory::unsharded_params)]);
      }
    }
    return most;
  };
  CHECK(forward_gathered(limited) == 2 * 4000);
  CHECK(forward_gathered(unlimited) == 3 * 4000);
}

TEST_CASE("simulator: overlap slows compute by its factor, and collectives by theirs (Note [Collective slowdown])") {
  const ModelSpec model = toy_blocks(2);
  const StepSchedule schedule = lower_plan(toy_plan(model, 2), model, toy_options(2));
  HardwareProfile profile = round_profile();
  profile.set_overlap_slowdown(1.5);
  const SimulationResult compute_slowed = simulate(schedule, profile);
  // fwd1 (4 ms) overlaps AG2 for 2 ms → 4 + 0.5 × 2 = 5 ms.
  for (const auto& event : compute_slowed.timeline.events) {
    if (event.kind == "forward" && event.unit == 1) CHECK(event.duration_s() == doctest::Approx(5 * ms));
    if (event.kind == "forward" && event.unit == 2) CHECK(event.duration_s() == doctest::Approx(4 * ms));
  }

  profile.set_overlap_slowdown(1.0);
  profile.overlap_collective_slowdown = 3.0;
  const SimulationResult result = simulate(schedule, profile);
  // AG2 (2 ms of work) is issued at 2 ms beside fwd1 (2-6 ms): 4 ms at a third of the speed do 4/3 ms of it; fwd2
  // waits for it, so the last 2/3 ms run at full speed: AG2 ends, and fwd2 starts, at 6 2/3 ms — a fixed point, since
  // fwd2 then starts exactly where AG2 ends. The backward all-gather and the first reduce-scatter stay hidden (2 ms of
  // work in 6 ms beside an 8 ms backward); the last reduce-scatter is alone: 2 ms. Step: 30 + 2/3 ms.
  for (const auto& event : result.timeline.events) {
    if (event.kind == "all_gather" && event.unit == 2 && event.start_s < 5 * ms) {
      CHECK(event.end_s == doctest::Approx(20.0 / 3 * ms));
    }
    if (event.kind == "forward" && event.unit == 2) CHECK(event.start_s == doctest::Approx(20.0 / 3 * ms));
    if (event.kind == "reduce_scatter" && event.unit == 2) CHECK(event.duration_s() == doctest::Approx(6 * ms));
    if (event.kind == "reduce_scatter" && event.unit == 1) CHECK(event.duration_s() == doctest::Approx(2 * ms));
  }
  CHECK(result.summary.step_time_s == doctest::Approx(92.0 / 3 * ms));
  // The catalog's 1: collectives take their own time whatever runs beside them.
  profile.overlap_collective_slowdown = 1.0;
  CHECK(simulate(schedule, profile).summary.step_time_s == doctest::Approx(30 * ms));
}

TEST_CASE("simulator: peak memory by category equals the hand computation") {
  const ModelSpec model = toy_blocks(2);
  const Plan plan = toy_plan(model, 2);
  const StepSchedule schedule = lower_plan(plan, model, toy_options(2));
  const SimulationResult result = simulate(schedule, round_profile());
  const auto& peak = result.summary.memory_at_peak;
  const auto at = [&](MemoryCategory category) { return peak[static_cast<std::size_t>(category)]; };
  // Persistent: 2 units × 500-element shards: params 4000 B, grads 4000 B, AdamW 8000 B (fp32).
  CHECK(at(MemoryCategory::sharded_params) == 4000);
  CHECK(at(MemoryCategory::sharded_grads) == 4000);
  CHECK(at(MemoryCategory::optimizer_states) == 8000);
  // Peak at 20 ms, when unit 1's backward starts: unit 1 gathered (4000), unit 2's full gradient still waiting for
  // its reduce-scatter (4000) plus unit 1's new one (4000), the reduce-scatter output (2000), and unit 1's
  // activations (10 elements × 4 B × 4 tokens = 160) — unit 2's were freed by its backward.
  CHECK(at(MemoryCategory::unsharded_params) == 4000);
  CHECK(at(MemoryCategory::unsharded_grads) == 8000);
  CHECK(at(MemoryCategory::comm_buffers) == 2000);
  CHECK(at(MemoryCategory::activations) == 160);
  CHECK(result.summary.peak_memory_bytes == 30160);
  CHECK(result.summary.peak_op.find("backward") == 0);
}

// Note [Hand-derived peak]: estimate takes its breakdown from the simulated schedule (run_estimate calls
// analyze_step), so comparing the two compares the simulator with itself. Both are compared here with the peak of
// Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json: h 4096, f 14336, 32 layers, 32 heads, 8 KV heads of 128, vocab
// 128256, untied head) on 4 × 8 H100 (N = 32), bf16-mixed, AdamW, full AC, s = 2048, b = 1, one unit per block,
// written term by term from the formulas, not from ModelSpec's fields. With full AC the peak is the lm_head's
// backward, where the loss's fp32 gradient joins everything kept; without AC (the second case) every block's saved
// inventory is there too. Mutations tried: a Llama block's saved inventory 5h + 2kv + 4f instead of 6h + 2kv + 4f
// (decoder_builder.cpp) fails the second case (activations 13662945280 vs 14199816192) while the old estimate ==
// simulate comparison passed it; the loss's backward workspace left out (unit_layout.cpp) fails five terms of the
// first, the peak moving to layers.30's backward (activations 847511552 vs 3722444800).
TEST_CASE("simulator: estimate and simulate both give llama3-8b's hand-derived peak, term by term") {
  const std::int64_t h = 4096, f = 14336, kv = 8 * 128, vocab = 128256, layers = 32, heads = 32, n = 32;
  const std::int64_t s = 2048, b = 1;
  // Parameters: a block has q, o (h×h), k, v (h×kv), gate, up, down (h×f) and two RMSNorm weights; the root unit the
  // embedding, the final norm and the untied lm_head. Both divide by 32, so FSDP1's right-padding adds nothing.
  const std::int64_t block = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h;
  const std::int64_t root = vocab * h + h + vocab * h;
  const std::int64_t psi = layers * block + root;
  REQUIRE(psi == 8'030'261'248);  // the published parameter count
  // bf16-mixed (FSDP1 MixedPrecision): fp32 sharded parameters and gradients, AdamW's m and v in fp32: 16Ψ/N.
  const long long sharded_params = 4 * psi / n, sharded_grads = 4 * psi / n, optimizer = 8 * psi / n;
  // The peak is the lm_head's backward, the first op of backward: the loss's fp32 logits are largest there.
  // Gathered in bf16: layers.31, prefetched for the backward that follows (the root's backward_prefetch), and the root
  // unit, kept gathered from forward to the end of backward.
  const long long unsharded_params = 2 * block, root_unit = 2 * root;
  // Unsharded bf16 gradients: only the root's yet (its lm_head is the first layer to produce gradients).
  const long long unsharded_grads = 2 * root;
  // Comm buffers: the bf16 cast of layers.31's fp32 shard that feeds its prefetched all-gather (FSDP1's _mp_shard).
  const long long comm_buffers = 2 * (block / n);
  // Activations in bf16. Full recompute keeps each block's input, 2sbh bytes (Korthikanti et al. 2022 §4.1), for all
  // 32 blocks; the final norm keeps its input (2sh). The lm_head keeps its input and the logits (2s(h + V)) and the
  // fp32 log-softmax output (4sV, Korthikanti §4.3), and its backward makes nll_loss's and log_softmax's fp32
  // gradients, 8sV more, alive while it runs (Note [Workspaces] in planner/unit_layout.h).
  const long long activations = 32 * (2 * s * b * h) + 2 * s * b * h + s * b * (2 * (h + vocab) + 4 * vocab) +
                                s * b * (8 * vocab);
  // The H100's CUDA context and allocator reserve (the catalog's context_overhead_bytes, 1 GiB).
  const long long overhead = 1LL << 30;
  const long long total = sharded_params + sharded_grads + optimizer + unsharded_params + root_unit +
                          unsharded_grads + comm_buffers + activations + overhead;

  const HardwareCatalog catalog = HardwareCatalog::builtin();
  EstimateRequest request;
  request.model = preset_model("llama3-8b");
  request.cluster = parse_cluster("4x8xH100-80GB", catalog);
  request.profile = profile_from_cluster(request.cluster);
  request.training.seq_len = s;
  request.training.micro_batch = b;
  request.training.checkpointing = ActivationCheckpointing::full;
  request.wrapping = wrap_per_block(request.model);
  const EstimateResult estimate = run_estimate(request);
  const MemoryBreakdown& got = estimate.memory.breakdown;
  CHECK(got.sharded_params_bytes == sharded_params);
  CHECK(got.sharded_grads_bytes == sharded_grads);
  CHECK(got.optimizer_states_bytes == optimizer);
  CHECK(got.unsharded_params_bytes == unsharded_params);
  CHECK(got.root_unit_bytes == root_unit);
  CHECK(got.unsharded_grads_bytes == unsharded_grads);
  CHECK(got.comm_buffers_bytes == comm_buffers);
  CHECK(got.activation_bytes == activations);
  CHECK(got.overhead_bytes == overhead);
  CHECK(got.total_bytes() == total);
  CHECK(estimate.simulation.peak_op == "backward lm_head");
  // simulate's own path (the plan's schedule simulated directly) peaks at the same bytes.
  const Plan plan = default_plan(request.model, request.training, request.strategy, request.wrapping, 32);
  const StepAnalysis simulated = analyze_step(request.model, request.cluster, request.profile, plan, false);
  CHECK(simulated.simulation.summary.peak_memory_bytes == total);

  // Without checkpointing every block keeps, per token: the two norm inputs, the q/k/v and o_proj inputs and q after
  // RoPE (6h), k and v (2kv), the MLP's gate and up outputs, the SiLU output and the down_proj input (4f), all bf16,
  // and FlashAttention's fp32 log-sum-exp per head (4·heads bytes); no s² term with flash attention.
  request.training.checkpointing = ActivationCheckpointing::none;
  const EstimateResult uncheckpointed = run_estimate(request);
  CHECK(uncheckpointed.simulation.peak_op == "backward lm_head");
  CHECK(uncheckpointed.memory.breakdown.activation_bytes ==
        32 * s * b * (2 * (6 * h + 2 * kv + 4 * f) + 4 * heads) + 2 * s * b * h +
            s * b * (2 * (h + vocab) + 4 * vocab) + s * b * (8 * vocab));
}

TEST_CASE("simulator: the trace parses back with one track per stream and a memory counter; the report is offline") {
  const ModelSpec model = preset_model("tiny-llama");
  const Cluster cluster = parse_cluster("2xcpu", HardwareCatalog::builtin());
  TrainingConfig training;
  training.seq_len = 64;
  const Plan plan = default_plan(model, training, {}, wrap_per_block(model), 2);
  const StepAnalysis analysis = analyze_step(model, cluster, profile_from_cluster(cluster), plan, true);
  const nlohmann::json trace = to_chrome_trace(analysis.simulation.timeline);
  const Timeline back = from_chrome_trace(trace, "memory");
  CHECK(back.events.size() == analysis.schedule.ops.size());
  std::vector<std::string> streams = back.streams();
  std::sort(streams.begin(), streams.end());
  CHECK(streams == std::vector<std::string>{"all_gather", "compute", "reduce_scatter"});
  int thread_names = 0, counters = 0;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("name") == "thread_name") ++thread_names;
    if (event.at("ph") == "C") ++counters;
  }
  CHECK(thread_names == 3);
  CHECK(counters > 0);
  CHECK(back.peak_memory_bytes(0) == analysis.simulation.summary.peak_memory_bytes);
  ReportInput report;
  report.title = "tiny";
  report.timeline = &analysis.simulation.timeline;
  const std::string html = render_html_report(report);
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("http") == std::string::npos);  // nothing to fetch: opens with no network
  CHECK(html.find("<script") == std::string::npos);
}

TEST_CASE("simulator: a per-op dispatch overhead lengthens every compute op, serially; waits and frees stay instants") {
  const StepSchedule schedule = unprefetched_toy_schedule();
  HardwareProfile profile = round_profile();
  const double base_s = simulate(schedule, profile).summary.step_time_s;
  profile.op_dispatch_overhead_s = 0.5 * ms;
  const SimulationResult result = simulate(schedule, profile);
  std::size_t working_ops = 0;
  for (const Op& op : schedule.ops) {
    working_ops += op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::optimizer_step;
  }
  // Without prefetch the compute stream is the critical path (the optimizer waits for the last reduce-scatter), so
  // each forward, backward and the optimizer step add their overhead once.
  CHECK(result.summary.step_time_s == doctest::Approx(base_s + static_cast<double>(working_ops) * 0.5 * ms));
  for (const auto& event : result.timeline.events) {
    const Op& op = schedule.ops[static_cast<std::size_t>(event.op_id)];
    if (op.kind == OpKind::wait || op.kind == OpKind::free_unsharded) CHECK(event.duration_s() == 0.0);
  }
  // The profile JSON carries it, and a negative value is refused.
  check_profile_key(profile, "op_dispatch_overhead_s", 0.5 * ms, &HardwareProfile::op_dispatch_overhead_s);
}

TEST_CASE("simulator: a collective's issue overhead lengthens the compute stream where it is issued") {
  const StepSchedule schedule = unprefetched_toy_schedule();
  HardwareProfile profile = round_profile();
  const SimulationResult base = simulate(schedule, profile);
  profile.collective_issue_overhead_s = 0.3 * ms;
  const SimulationResult result = simulate(schedule, profile);
  std::size_t collectives = 0;
  for (const Op& op : schedule.ops) {
    collectives += op.kind == OpKind::all_gather || op.kind == OpKind::reduce_scatter || op.kind == OpKind::all_reduce;
  }
  REQUIRE(collectives > 0);
  // Without prefetch every collective is issued on the critical path: each adds its overhead once.
  CHECK(result.summary.step_time_s ==
        doctest::Approx(base.summary.step_time_s + static_cast<double>(collectives) * 0.3 * ms));
  // A collective starts once issued: never before the compute stream has spent its issue time.
  for (std::size_t index = 0; index < schedule.ops.size(); ++index) {
    const Op& op = schedule.ops[index];
    if (op.kind != OpKind::all_gather) continue;
    CHECK(result.timeline.events[index].start_s >= base.timeline.events[index].start_s + 0.3 * ms - 1e-12);
  }
  // The profile JSON carries it, and a negative value is refused.
  check_profile_key(profile, "collective_issue_overhead_s", 0.3 * ms, &HardwareProfile::collective_issue_overhead_s);
}

TEST_CASE("simulator: a unit's first backward op also zero-fills its gradient buffer, at the memory rate") {
  const StepSchedule schedule = unprefetched_toy_schedule();
  HardwareProfile profile = round_profile();
  profile.hbm_bytes_per_s = 1e6;  // slow enough that the fills are milliseconds
  const SimulationResult result = simulate(schedule, profile);
  std::size_t filled = 0;
  for (const auto& event : result.timeline.events) {
    const Op& op = schedule.ops[static_cast<std::size_t>(event.op_id)];
    if (op.kind != OpKind::forward && op.kind != OpKind::backward) continue;
    // The slowdown is 1, so an op lasts its work plus its fill: the gradient's bytes once at the memory rate.
    const double work_s = pass_time_s(*op.kernels, schedule.compute_element_bytes, profile);
    CHECK(event.duration_s() == doctest::Approx(work_s + static_cast<double>(op.zeroed_bytes) / 1e6));
    filled += op.zeroed_bytes > 0 ? 1 : 0;
  }
  CHECK(filled == 2);  // each block unit's (the toy root holds no parameters)
}
