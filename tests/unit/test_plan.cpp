// Tests of plans: the default plan, JSON round trip, and errors that name the unit and field.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "cluster.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "json_input.h"
#include "lowering.h"
#include "model_presets.h"
#include "plan_export.h"
#include "plan_json.h"
#include "simulator.h"
#include "step_analysis.h"

using namespace shardplan;

TEST_CASE("plan: the default plan is FSDP's usual wrapping with one-ahead prefetch") {
  const ModelSpec model = preset_model("tiny-llama");
  TrainingConfig training;
  training.seq_len = 64;
  training.checkpointing = ActivationCheckpointing::full;
  const Plan plan = default_plan(model, training, {}, wrap_per_block(model), 4);
  REQUIRE(plan.units.size() == 5);
  CHECK(plan.units[0].is_root);
  CHECK_FALSE(plan.units[0].reshard_after_forward.enabled);
  CHECK(plan.units[1].reshard_after_forward.enabled);
  CHECK(plan.units[0].forward_prefetch == std::vector<int>{1});
  CHECK(plan.units[0].backward_prefetch == std::vector<int>{4});  // backward starts with the head, then unit 4
  CHECK(plan.units[2].forward_prefetch == std::vector<int>{3});
  CHECK(plan.units[2].backward_prefetch == std::vector<int>{1});
  CHECK(plan.units[1].backward_prefetch.empty());
  CHECK(plan.layer_checkpointing[0] == ActivationCheckpointing::none);  // the embedding is never checkpointed
  CHECK(plan.layer_checkpointing[1] == ActivationCheckpointing::full);
}

TEST_CASE("plan: JSON round trip") {
  const ModelSpec model = preset_model("tiny-llama");
  TrainingConfig training;
  training.seq_len = 64;
  training.global_batch = 8;
  Plan plan = default_plan(model, training, parse_strategy("hybrid_shard:2"), wrap_blocks(model, 2), 4);
  plan.units[1].reshard_after_forward.enabled = false;
  plan.layer_checkpointing[2] = ActivationCheckpointing::selective;
  plan.layer_checkpointing[3] = ActivationCheckpointing::selective_op;
  plan.offload.params = true;
  plan.training.attention_kernel = AttentionKernel::triton;
  const nlohmann::json document = to_json(plan, model);
  CHECK(document.at("schema") == "shardplan.plan/v1");
  const Plan back = plan_from_json(document, "p.json", model);
  CHECK(to_json(back, model) == document);
  CHECK(back.grad_accumulation_steps == 2);
  CHECK(back.units[1].strategy.shard_group_size == 2);
  CHECK(back.layer_checkpointing[2] == ActivationCheckpointing::selective);
  CHECK(back.layer_checkpointing[3] == ActivationCheckpointing::selective_op);
  CHECK(back.training.attention_kernel == AttentionKernel::triton);
  CHECK(back.offload.params);
}

TEST_CASE("plan: a trace's fingerprint names the model and digests the plan, not its name") {
  const ModelSpec model = preset_model("tiny-llama");
  TrainingConfig training;
  training.seq_len = 64;
  Plan plan = default_plan(model, training, parse_strategy("full_shard"), wrap_blocks(model, 2), 4);
  const nlohmann::json fingerprint = trace_fingerprint(model, plan);
  CHECK(fingerprint.at("model") == "tiny-llama");
  CHECK(fingerprint.at("parameters") == model.param_count());
  CHECK(fingerprint.at("plan_digest").get<std::string>().size() == 16);
  // A plan file read back (simulate and run both read it) and a renamed copy give the same digest.
  const Plan back = plan_from_json(to_json(plan, model), "p.json", model);
  CHECK(trace_fingerprint(model, back) == fingerprint);
  Plan renamed = plan;
  renamed.name = "renamed";
  CHECK(trace_fingerprint(model, renamed) == fingerprint);
  Plan other = plan;
  other.units[1].reshard_after_forward.enabled = !other.units[1].reshard_after_forward.enabled;
  CHECK(trace_fingerprint(model, other).at("plan_digest") != fingerprint.at("plan_digest"));
}

TEST_CASE("plan: tensor_parallel_degree round trips, defaults to 1 and is checked against model and node") {
  const ModelSpec model = preset_model("tiny-llama");  // GQA: 4 heads, 2 key/value heads
  TrainingConfig training;
  training.seq_len = 64;
  Plan plan = default_plan(model, training, {}, wrap_per_block(model), 4);
  CHECK(plan.tensor_parallel_degree == 1);
  CHECK_FALSE(to_json(plan, model).contains("tensor_parallel_degree"));  // plans from before read and write as before
  plan.tensor_parallel_degree = 2;
  const nlohmann::json document = to_json(plan, model);
  CHECK(document.at("tensor_parallel_degree") == 2);
  const Plan back = plan_from_json(document, "p.json", model);
  CHECK(back.tensor_parallel_degree == 2);
  CHECK(parallel_dims(back, 4).data_parallel_world_size() == 2);
  CHECK_NOTHROW(validate_plan(back, model, 4, 4));
  const auto error_of = [&](int degree, int world, int per_node) {
    Plan changed = back;
    changed.tensor_parallel_degree = degree;
    try {
      validate_plan(changed, model, world, per_node);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  CHECK(error_of(3, 6, 6).find("tensor_parallel_degree 3: expected a power of two") != std::string::npos);
  CHECK(error_of(4, 4, 2).find("divisor of the 2 GPUs per node") != std::string::npos);
  const std::int64_t heads = model.architecture->num_heads;
  CHECK(error_of(static_cast<int>(heads) * 2, static_cast<int>(heads) * 2, static_cast<int>(heads) * 2)
            .find("attention heads") != std::string::npos);
  nlohmann::json bad = document;
  bad["tensor_parallel_degree"] = 0;
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json", model), doctest::Contains("tensor_parallel_degree"), InputError);
}

TEST_CASE("plan: bad plan files name the unit and the field") {
  const ModelSpec model = preset_model("tiny-llama");
  const auto error_of = [&](const std::string& text) {
    try {
      plan_from_json(parse_json_text(text, "p.json"), "p.json", model);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  const std::string head = R"({"schema": "shardplan.plan/v1", "training": {"seq_len": 64}, "units": [)";
  CHECK(error_of(R"({"units": []})").find("'schema'") != std::string::npos);
  CHECK(error_of(head + R"({"root": true}, {"first_layer": 1, "last_layer": 99}]})").find("units[1].last_layer") !=
        std::string::npos);
  CHECK(error_of(head + R"({"root": true}, {"first_layer": 1, "strategy": "ful_shard"}]})").find("units[1].strategy") !=
        std::string::npos);
  CHECK(error_of(head + R"({"root": true, "reshard_after_forward": "yes"}]})").find("reshard_after_forward") !=
        std::string::npos);
  CHECK(error_of(head + R"({"root": true}, {"first_layer": 1, "ac": "some"}]})").find("units[1].ac") !=
        std::string::npos);
  CHECK(error_of(head + R"({"root": true, "prefetch": [1]}]})").find("did you mean") != std::string::npos);
}

// Issue 15's knob demonstration: `--ac full --ac-every 2` is TrainingConfig::checkpoint_every_blocks, read only by
// default_plan. The lowering, the simulator, the exports and the runners see per-layer modes as before.
TEST_CASE("plan: activation checkpointing on every k-th block, lowered, simulated and exported") {
  const ModelSpec model = preset_model("tiny-llama");
  const Cluster cluster = parse_cluster("4xcpu", HardwareCatalog::builtin());
  TrainingConfig training;
  training.seq_len = 64;
  training.checkpointing = ActivationCheckpointing::full;
  training.checkpoint_every_blocks = 2;
  const Plan plan = default_plan(model, training, {}, wrap_per_block(model), 4);
  std::vector<std::string> checkpointed;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (plan.layer_checkpointing[layer] == ActivationCheckpointing::full) checkpointed.push_back(model.layers[layer].name);
  }
  // Blocks counted from 1, every second: tiny-llama's blocks 2 and 4 (layers.1, layers.3), as torchtitan's
  // selective_ac_option "2" wraps them.
  CHECK(checkpointed == std::vector<std::string>{model.layers[2].name, model.layers[4].name});

  LoweringOptions options;
  options.world_size = 4;
  options.gpus_per_node = 4;
  const StepSchedule schedule = lower_plan(plan, model, options);
  std::set<int> recomputed;
  for (const Op& op : schedule.ops) {
    if (op.kind == OpKind::recompute) recomputed.insert(op.layer);
    if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::recompute) {
      CHECK(op.checkpointing == plan.layer_checkpointing[static_cast<std::size_t>(op.layer)]);
    }
  }
  CHECK(recomputed == std::set<int>{2, 4});

  // Half the blocks recompute: the step is slower than without AC and faster than full AC; the peak in between.
  const HardwareProfile profile = profile_from_cluster(cluster);
  const auto simulate_every = [&](ActivationCheckpointing mode, std::int64_t every) {
    TrainingConfig variant = training;
    variant.checkpointing = mode;
    variant.checkpoint_every_blocks = every;
    return simulate(lower_plan(default_plan(model, variant, {}, wrap_per_block(model), 4), model, options), profile,
                    false)
        .summary;
  };
  const auto none = simulate_every(ActivationCheckpointing::none, 1);
  const auto half = simulate_every(ActivationCheckpointing::full, 2);
  const auto full = simulate_every(ActivationCheckpointing::full, 1);
  CHECK(none.step_time_s < half.step_time_s);
  CHECK(half.step_time_s < full.step_time_s);
  CHECK(full.peak_memory_bytes < half.peak_memory_bytes);
  CHECK(half.peak_memory_bytes < none.peak_memory_bytes);

  const ExportedFile fsdp2 = export_fsdp2(plan, model, 4, 4);
  const std::string listed =
      "FULL_CHECKPOINT_LAYERS = [\"" + model.layers[2].name + "\", \"" + model.layers[4].name + "\"]";
  CHECK(fsdp2.contents.find(listed) != std::string::npos);

  training.checkpoint_every_blocks = 0;
  CHECK_THROWS_WITH_AS(validate_training(training, model), doctest::Contains("--ac-every"), InputError);
  training.checkpoint_every_blocks = static_cast<std::int64_t>(model.block_count()) + 1;
  CHECK_THROWS_WITH_AS(validate_training(training, model), doctest::Contains("--ac-every"), InputError);
}
