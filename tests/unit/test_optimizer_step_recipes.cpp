// Tests of where the optimizer steps, against figures computed by hand: --optimizer-in-backward (torchtune's
// optimizer_in_bwd, Note [Optimizer in backward]) on llama3-8b on one GPU, and --optimizer cpu-adamw (DeepSpeed's
// CPU-Adam, Note [CPU optimizer step]) on llama3-8b over 8 H100s with CPU offload; their JSON, text, exports
// (Note [Exported optimizer step]) and refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster.h"
#include "compute_cost.h"
#include "errors.h"
#include "export_torchtitan.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "host_memory.h"
#include "host_optimizer.h"
#include "lowering.h"
#include "model_presets.h"
#include "op_durations.h"
#include "optimizer_in_backward.h"
#include "plan.h"
#include "plan_export.h"
#include "plan_json.h"
#include "precision.h"
#include "simulator.h"
#include "unit_layout.h"
#include "wrap_cases.h"
#include "wrap_dp.h"
#include "wrapping.h"

using namespace shardplan;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::int64_t category(const MemoryByCategory& bytes, MemoryCategory which) {
  return bytes[static_cast<std::size_t>(which)];
}

// The InputError message `call` throws ("" when it throws none).
template <typename Call>
std::string refusal(Call call) {
  try {
    call();
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

// llama3-8b: 8,030,261,248 parameters (its states under adamw are 8 bytes each: 64,242,089,984, the 8-bit test's).
constexpr std::int64_t kLlama3_8bParams = 8'030'261'248LL;

// llama3-8b at 2048 tokens, one micro-batch, bf16-mixed (fp32 gradient storage), one unit per block, on `gpus`
// H100s.
struct Llama3Case {
  ModelSpec model = preset_model("llama3-8b");
  Cluster cluster;
  HardwareProfile profile;
  Plan plan;
  StepSchedule schedule;

  Llama3Case(int gpus, bool in_backward, OptimizerKind optimizer = OptimizerKind::adamw, bool offload = false)
      : cluster(parse_cluster(std::to_string(gpus) + "xH100-80GB", HardwareCatalog::builtin())),
        profile(profile_from_cluster(cluster)) {
    TrainingConfig training;
    training.seq_len = 2048;
    training.optimizer = optimizer;
    training.optimizer_in_backward = in_backward;
    plan = default_plan(model, training, ShardingStrategy{}, wrap_per_block(model), gpus);
    plan.offload.params = offload;
    schedule = lower_plan(plan, model, {gpus, gpus, profile.context_overhead_bytes});
  }
  MemoryByCategory persistent() const {
    return persistent_memory(unit_layouts(plan, model, cluster.world_size(), cluster.gpus_per_node), plan, 0);
  }
  std::int64_t peak() const { return simulate(schedule, profile, false).summary.peak_memory_bytes; }
};

}  // namespace

// By hand (Note [Optimizer in backward]): without it one GPU keeps every fp32 gradient, 8,030,261,248 × 4 =
// 32,121,044,992 bytes, in its persistent memory; with it none. Each unit is stepped once, on its own shard (all of
// it on one rank: the units' elements sum to the model's 8,030,261,248), holding its fp32 gradient (elements × 4)
// while it runs; the final step moves nothing. The largest unit is the root (the embedding and the head, 128256 ×
// 4096 = 525,336,576 elements each, and the final norm's 4096: 1,050,677,248 × 4 = 4,202,708,992 bytes). The peak
// falls by the gradients less at most that one unit in flight; here by all of them (148,485,783,552 →
// 116,364,738,560 bytes: the peak comes before any unit's step, the root's bf16 gradient copy in both). The step's
// work is the same HBM traffic (28 bytes per element), only split by unit.
// Mutation tried: persistent_memory still counting sharded_grads under it fails the first CHECK on `on`.
TEST_CASE("recipes: --optimizer-in-backward, llama3-8b on one GPU: the gradients are no longer held (by hand)") {
  const Llama3Case off(1, false), on(1, true);
  CHECK(category(off.persistent(), MemoryCategory::sharded_grads) == 32'121'044'992LL);
  CHECK(category(on.persistent(), MemoryCategory::sharded_grads) == 0);
  CHECK(category(on.persistent(), MemoryCategory::optimizer_states) ==
        category(off.persistent(), MemoryCategory::optimizer_states));

  std::int64_t stepped = 0, largest_grad = 0;
  int unit_steps = 0, final_steps = 0;
  double unit_step_bytes = 0;
  for (const Op& op : on.schedule.ops) {
    if (op.kind != OpKind::optimizer_step) continue;
    if (op.unit < 0) {
      ++final_steps;
      CHECK(op.memory_bytes == 0);
      CHECK(op.deps.size() == static_cast<std::size_t>(unit_steps));  // it joins the units' steps
      continue;
    }
    ++unit_steps;
    stepped += op.optimizer_elements;
    unit_step_bytes += op.memory_bytes;
    REQUIRE(op.frees.size() == 1);
    CHECK(op.frees[0].category == MemoryCategory::sharded_grads);
    CHECK(op.frees[0].bytes == op.optimizer_elements * 4);
    largest_grad = std::max(largest_grad, op.frees[0].bytes);
  }
  CHECK(final_steps == 1);
  CHECK(unit_steps == static_cast<int>(on.plan.units.size()));  // every unit trains
  CHECK(stepped == kLlama3_8bParams);
  CHECK(unit_step_bytes == doctest::Approx(28.0 * static_cast<double>(kLlama3_8bParams)));
  CHECK(largest_grad == 4'202'708'992LL);
  const std::int64_t saved = off.peak() - on.peak();
  MESSAGE("peak without " << off.peak() << " B, with " << on.peak() << " B");
  CHECK(saved >= 32'121'044'992LL - largest_grad);
  CHECK(saved <= 32'121'044'992LL);
  CHECK(off.peak() == 148'485'783'552LL);
  CHECK(on.peak() == 116'364'738'560LL);
}

// The search times wrappings from fragments (Note [Fragments]): with each unit's own step in its backward fragment
// and a final step of nothing, a wrapping's fragments still give the simulated step where they say they are exact (a
// lower bound elsewhere), and their memory floor stays under the simulated peak. Under full_shard and shard_grad_op
// the unit's step runs on the reduce-scatter's stream right after it, and the next post-backward waits for the
// reduce-scatter alone (Note [Reduce-scatter waits] in planner/lowering.cpp): a fragment's boundary state holds
// when that stream is free (after the step), not when the reduce-scatter ended, so those wrappings are bounds. With
// no_shard (an all-reduce) and HSDP (the step after the all-reduce, on its stream) they are timed exactly.
TEST_CASE("recipes: --optimizer-in-backward, the search's fragments time the simulated step") {
  using testing::WrapCase;
  constexpr auto none = ActivationCheckpointing::none;
  const std::vector<WrapCase> cases = {
      {"llama2-7b-10", "8xH100-80GB", "full_shard", none, 4096},
      {"llama2-7b-10", "8xA100-80GB", "shard_grad_op", none, 2048},
      {"tiny-llama", "2xcpu", "full_shard", none, 128, 1.2, 2e-4, 2e-4},
      {"tiny-llama", "4xcpu", "no_shard", none, 128, 0, 1e-4, 3e-4},
      {"gpt2", "4x8xA100-40GB", "hybrid_shard", ActivationCheckpointing::full, 512, 1.2, 1e-5, 1e-4}};
  for (const WrapCase& c : cases) {
    INFO(c.name());
    testing::WrapSetup setup = testing::wrap_setup(c);
    setup.base.training.optimizer_in_backward = true;
    WrapFragments fragments(setup.model, setup.base, setup.profile, setup.cluster.world_size(),
                            setup.cluster.gpus_per_node);
    int exact = 0;
    for (const testing::CaseWrapping& wrapping : testing::case_wrappings(setup, 6, fragments.keep_choice())) {
      const testing::Simulated sim = testing::simulate_wrapping(setup, wrapping);
      const WrapEvaluation evaluation = evaluate_wrapping(fragments, wrapping.units);
      if (evaluation.exact) {
        ++exact;
        REQUIRE(evaluation.step_s == doctest::Approx(sim.step_s).epsilon(1e-9));
      } else {
        REQUIRE(evaluation.step_s <= sim.step_s * (1 + 1e-9));
      }
      REQUIRE(evaluation.floor_bytes <= sim.peak_bytes);
    }
    MESSAGE(c.name() << ": " << exact << " wrapping(s) timed exactly");
    const std::string strategy = c.strategy;
    if (strategy == "no_shard" || strategy == "hybrid_shard") CHECK(exact > 0);
  }
}

TEST_CASE("recipes: --optimizer-in-backward in the plan JSON (only when on), the text and the exports") {
  const Llama3Case on(8, true);
  const nlohmann::json document = to_json(on.plan, on.model);
  CHECK(document.at("training").at("optimizer_in_backward") == true);
  CHECK(plan_from_json(document, "test", on.model).training.optimizer_in_backward);
  CHECK(has(recipe_text(on.plan.training), "optimizer in backward (torchtune optimizer_in_bwd"));
  Plan plain = on.plan;
  plain.training.optimizer_in_backward = false;
  CHECK_FALSE(to_json(plain, on.model).at("training").contains("optimizer_in_backward"));
  CHECK(recipe_text(plain.training).empty());

  const std::string script = export_fsdp2(on.plan, on.model, 8, 8).contents;
  CHECK(has(script, "OPTIMIZER_IN_BACKWARD = True\n"));
  CHECK(has(script, "        param.register_post_accumulate_grad_hook(step)\n"));
  CHECK_FALSE(has(export_fsdp2(plain, on.model, 8, 8).contents, "OPTIMIZER_IN_BACKWARD"));
  Plan titan = on.plan;
  titan.training.precision = precision_recipe("bf16-mixed-fp32-reduce");
  const std::string toml = export_torchtitan(titan, on.model, 8, 8).contents;
  CHECK(has(toml, "[optimizer]\nname = \"AdamW\"\nearly_step_in_backward = true\n"));
  for (const std::string format : {"fsdp1", "deepspeed"}) {
    CHECK(refusal([&] { (void)export_plan(format, on.plan, on.model, 8, 8); }) ==
          "--export " + format + ": --optimizer-in-backward is carried by fsdp2 and torchtitan exports only (" +
              format + " steps the optimizer after backward); expected --export fsdp2 or torchtitan, or no " +
              "--optimizer-in-backward");
  }
}

// torchtune refuses gradient accumulation with optimizer_in_bwd, torchtitan a pipeline; CPU offload and TP are not
// modelled with it. Each refusal is one line naming the flag.
TEST_CASE("recipes: --optimizer-in-backward refuses accumulation, pipelines, CPU offload and TP in one line") {
  const Llama3Case on(8, true);
  const LoweringOptions options{8, 8, on.profile.context_overhead_bytes};
  Plan accumulating = on.plan;
  accumulating.grad_accumulation_steps = 2;
  const std::string accumulation = refusal([&] { (void)lower_plan(accumulating, on.model, options); });
  CHECK(has(accumulation, "--optimizer-in-backward with 2 micro-batches per step: torchtune refuses gradient "
                          "accumulation with optimizer_in_bwd"));
  Plan offloaded = on.plan;
  offloaded.offload.params = true;
  CHECK(has(refusal([&] { (void)lower_plan(offloaded, on.model, options); }),
            "--optimizer-in-backward with --cpu-offload: a host optimizer step per unit is not modelled"));
  Plan tensor_parallel = on.plan;
  tensor_parallel.tensor_parallel_degree = 2;
  CHECK(has(refusal([&] { (void)lower_plan(tensor_parallel, on.model, options); }),
            "--optimizer-in-backward with --tensor-parallel 2: modelled for FSDP alone"));
  Plan pipelined = on.plan;
  pipelined.pipeline = default_pipeline(on.model, 2, PipelineScheduleKind::one_f_one_b, 1);
  CHECK(has(refusal([&] { check_optimizer_in_backward(pipelined); }),
            "--optimizer-in-backward with --pipeline-parallel 2: torchtitan refuses optimizers in backward"));
  CHECK(accumulation.find('\n') == std::string::npos);
  // `plan` and `capacity` search with all of a rank's sequences in one micro-batch (no accumulation) unless pinned.
  TrainingConfig batched = on.plan.training;
  batched.global_batch = 64;
  CHECK(one_micro_batch_per_step(batched, false, 8).micro_batch == 8);
  CHECK(one_micro_batch_per_step(batched, true, 8).micro_batch == 1);
  batched.optimizer_in_backward = false;
  CHECK(one_micro_batch_per_step(batched, false, 8).micro_batch == 1);
}

// By hand (Note [CPU optimizer step]): llama3-8b over 8 H100s with FSDP's CPU offload keeps no model state on the
// GPUs; each rank's host holds its shard of the fp32 parameters (4), gradients (4) and AdamW's m and v (8): 16
// bytes per parameter, the node 16 × 8,030,261,248 = 128,484,179,968 bytes plus the shards' padding. The step streams
// 28 bytes per element at DeepSpeed CPU-Adam's measured rate, the node's 8 ranks sharing the host: a rank's shard of
// E elements takes E × 28 × 8 / (kCpuAdamBandwidthFraction × the node's DRAM bandwidth) — ZeRO-Offload's Table 4
// (10 B parameters in 2.57 s on a DGX-2 host: 3.891e9 × 28 B/s of its 255.9 GB/s, a fraction 0.4257) scaled by the
// host's bandwidth (the catalog's DGX H100 host: 614.4 GB/s). Per rank E = 8,030,261,248 / 8 = 1,003,782,656:
// 1,003,782,656 × 28 × 8 / (0.4257 × 614.4e9) = 0.8597 s.
TEST_CASE("recipes: --optimizer cpu-adamw, llama3-8b over 8 H100s with CPU offload: host states and step by hand") {
  const Llama3Case adam(8, false, OptimizerKind::cpu_adamw, true);
  CHECK(category(adam.persistent(), MemoryCategory::optimizer_states) == 0);
  CHECK(category(adam.persistent(), MemoryCategory::sharded_grads) == 0);
  const HostMemoryUse host = host_memory_use(adam.plan, adam.model, adam.cluster);
  CHECK(host.per_node_bytes >= 16 * kLlama3_8bParams);
  CHECK(static_cast<double>(host.per_node_bytes) == doctest::Approx(16.0 * kLlama3_8bParams).epsilon(1e-6));

  const std::vector<double> base_s = base_durations_s(adam.schedule, adam.profile);
  int steps = 0;
  for (const Op& op : adam.schedule.ops) {
    if (op.kind != OpKind::optimizer_step) continue;
    ++steps;
    CHECK(op.on_host);
    CHECK(op.memory_bytes == doctest::Approx(28.0 * static_cast<double>(op.optimizer_elements)));
    CHECK(op.optimizer_elements * 8 >= kLlama3_8bParams);
    const double by_hand = static_cast<double>(op.optimizer_elements) * 28.0 * 8 /
                           (kCpuAdamBandwidthFraction * adam.profile.host_memory_bytes_per_s);
    CHECK(base_s[static_cast<std::size_t>(op.id)] == doctest::Approx(by_hand).epsilon(1e-12));
    MESSAGE("cpu-adamw step: " << base_s[static_cast<std::size_t>(op.id)] << " s for " << op.optimizer_elements
                               << " elements per rank");
  }
  CHECK(steps == 1);
  CHECK(adam.profile.host_memory_bytes_per_s == doctest::Approx(614.4e9));
  CHECK(kCpuAdamBandwidthFraction == doctest::Approx(0.4257).epsilon(1e-3));
  CHECK(base_s.back() == doctest::Approx(0.8597).epsilon(1e-3));  // the step is the schedule's last op
  CHECK(kCpuAdamParamsPerS == doctest::Approx(3.891e9).epsilon(1e-3));  // 10e9 / 2.57 s
  CHECK(optimizer_from_string("cpu-adamw") == OptimizerKind::cpu_adamw);
  CHECK(optimizer_state_count(OptimizerKind::cpu_adamw) == 2);
  CHECK(has(recipe_text(adam.plan.training), "optimizer cpu-adamw (DeepSpeed CPU-Adam"));
}

TEST_CASE("recipes: --optimizer cpu-adamw exports to DeepSpeed's CPU-Adam only, and only with CPU offload") {
  const Llama3Case adam(8, false, OptimizerKind::cpu_adamw, true);
  const nlohmann::json config = nlohmann::json::parse(export_deepspeed(adam.plan, adam.model, 8, 8).contents);
  CHECK(config.at("optimizer") == nlohmann::json::parse(R"({"type": "AdamW", "params": {"torch_adam": false,
                                                           "adam_w_mode": true}})"));
  CHECK(config.at("zero_force_ds_cpu_optimizer") == true);
  CHECK(config.at("zero_optimization").at("offload_optimizer").at("device") == "cpu");
  const Llama3Case plain(8, false, OptimizerKind::adamw, true);
  CHECK_FALSE(nlohmann::json::parse(export_deepspeed(plain.plan, plain.model, 8, 8).contents).contains("optimizer"));
  for (const std::string format : {"fsdp2", "fsdp1", "torchtitan"}) {
    CHECK(refusal([&] { (void)export_plan(format, adam.plan, adam.model, 8, 8); }) ==
          "--export " + format + ": --optimizer cpu-adamw (DeepSpeed's CPU-Adam) is carried by deepspeed exports " +
              "only (" + format + " steps torch's AdamW on the host); expected --export deepspeed, or --optimizer " +
              "adamw");
  }
  CHECK(refusal([&] { check_optimizer_offload(adam.plan.training, false, "--cpu-offload"); }) ==
        "--optimizer cpu-adamw without --cpu-offload: DeepSpeed's CPU-Adam steps optimizer states held in host "
        "memory; expected --cpu-offload, or --optimizer adamw");
  nlohmann::json document = to_json(adam.plan, adam.model);
  CHECK(plan_from_json(document, "test", adam.model).training.optimizer == OptimizerKind::cpu_adamw);
  document["offload"] = {{"params", false}, {"optimizer", false}};
  CHECK(has(refusal([&] { (void)plan_from_json(document, "test", adam.model); }), "cpu-adamw"));
}
