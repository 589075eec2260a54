// Tests of plans: the default plan, JSON round trip, and errors that name the unit and field.
#include <doctest/doctest.h>

#include "errors.h"
#include "json_input.h"
#include "model_presets.h"
#include "plan_json.h"

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
  plan.offload.params = true;
  const nlohmann::json document = to_json(plan, model);
  CHECK(document.at("schema") == "shardplan.plan/v1");
  const Plan back = plan_from_json(document, "p.json", model);
  CHECK(to_json(back, model) == document);
  CHECK(back.grad_accumulation_steps == 2);
  CHECK(back.units[1].strategy.shard_group_size == 2);
  CHECK(back.layer_checkpointing[2] == ActivationCheckpointing::selective);
  CHECK(back.offload.params);
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
