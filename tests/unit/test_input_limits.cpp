// Regression tests of issue 20's input defects: deep JSON, silent narrowing, unbounded work, physical nonsense and
// type errors that escaped as internal errors — each now an InputError naming the field and its range.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "calibration.h"
#include "chrome_trace.h"
#include "cluster.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "hf_config.h"
#include "json_input.h"
#include "model_json.h"
#include "model_presets.h"
#include "plan.h"
#include "plan_json.h"
#include "test_support.h"
#include "training.h"

namespace {

using nlohmann::json;
using shardplan::InputError;
using shardplan::testing::input_error_message;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A value nested `depth` arrays deep, built without recursion (moving the inner value in each time).
json nested(std::size_t depth) {
  json value = json::array();
  for (std::size_t i = 1; i < depth; ++i) {
    json outer = json::array();
    outer.push_back(std::move(value));
    value = std::move(outer);
  }
  return value;
}

json tiny_plan() {
  return json::parse(R"({"schema": "shardplan.plan/v1", "training": {"seq_len": 64},
                         "units": [{"root": true, "forward_prefetch": [1]}, {"first_layer": 1, "last_layer": 4}]})");
}

std::string plan_error(const json& document) {
  const shardplan::ModelSpec model = shardplan::preset_model("tiny-llama");
  return input_error_message([&] { shardplan::plan_from_json(document, "p.json", model); });
}

}  // namespace

TEST_CASE("input limits: JSON nested 100,000 deep is refused at parse time with line:column") {
  // Reverted (no depth check in parse_json_text): the error path's dump of the value overflowed the stack (exit 139).
  const std::string text = R"({"vocab_size": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const std::string message = input_error_message([&] { shardplan::parse_json_text(text, "m.json"); });
  // The object is level 1, so the 128th bracket (column 143) opens level 129.
  CHECK(message == "m.json:1:143: JSON nested too deep: expected at most 128 levels of arrays and objects");
  // Brackets inside strings do not count, and 128 levels are fine.
  CHECK_NOTHROW(shardplan::parse_json_text(R"({"a": ")" + std::string(1000, '[') + R"("})", "m.json"));
  CHECK_NOTHROW(shardplan::parse_json_text(std::string(128, '[') + std::string(128, ']'), "m.json"));
  CHECK_THROWS_AS(shardplan::parse_json_text(std::string(129, '[') + std::string(129, ']'), "m.json"), InputError);
}

TEST_CASE("input limits: an error about a deep or large value never serialises it") {
  // Reverted (describe_json_value dumping the value): 100,000 levels overflowed the stack; a huge array was printed.
  const json document = {{"vocab_size", nested(100000)}};
  const shardplan::JsonObjectReader reader(document, "m.json");
  CHECK(input_error_message([&] { reader.positive_int("vocab_size"); }) ==
        "m.json: field 'vocab_size': expected a positive integer, got an array of 1 element");
  CHECK(shardplan::describe_json_value(json::array({1, 2, 3, 4, 5, 6, 7, 8, 9})) == "an array of 9 elements");
  CHECK(shardplan::describe_json_value(json{{"a", 1}, {"b", {{"c", 2}}}}) == "an object with 2 fields");
  CHECK(shardplan::describe_json_value(json::array({1000, 0})) == "[1000,0]");
}

TEST_CASE("input limits: integers are read in range, never narrowed") {
  const json document = {{"a", 4294967297LL}, {"b", 18446744073709551615ULL}, {"c", 2.0}, {"d", 7}};
  const shardplan::JsonObjectReader reader(document, "f.json");
  CHECK(input_error_message([&] { reader.int_in_range("a", 1, 1000); }) ==
        "f.json: field 'a': expected an integer in 1..1000, got 4294967297");
  // Past 2^63 - 1: unsigned in nlohmann, which get<int64_t>() would wrap to -1.
  CHECK(contains(input_error_message([&] { reader.positive_int("b"); }), "expected a positive integer"));
  CHECK(contains(input_error_message([&] { reader.int_in_range("c", 1, 9); }), "expected an integer in 1..9"));
  CHECK(reader.int_in_range("d", 1, 9) == 7);
  CHECK(!reader.optional_int_in_range("missing", 1, 9).has_value());
}

TEST_CASE("input limits: plan counts past an int are refused, not truncated") {
  // Reverted (static_cast<int> / get<int>() in plan_json.cpp): each of these ran as 1, 1 and [2].
  json accumulation = tiny_plan();
  accumulation["training"]["grad_accumulation_steps"] = 4294967297LL;
  CHECK(plan_error(accumulation) ==
        "p.json: field 'training.grad_accumulation_steps': expected an integer in 1..131072, got 4294967297");
  json inflight = tiny_plan();
  inflight["max_inflight_all_gathers"] = 4294967297LL;
  CHECK(contains(plan_error(inflight), "field 'max_inflight_all_gathers': expected an integer in 0..10001"));
  json prefetch = tiny_plan();
  prefetch["units"][0]["forward_prefetch"] = json::array({4294967298LL});
  CHECK(contains(plan_error(prefetch), "field 'units[0].forward_prefetch': expected an array of unit ids"));
  json reshard = tiny_plan();
  reshard["units"][1]["reshard_after_forward"] = 4294967298LL;
  CHECK(contains(plan_error(reshard), "field 'units[1].reshard_after_forward'"));
  json layer = tiny_plan();
  layer["units"][1]["last_layer"] = 4294967297LL;
  CHECK(contains(plan_error(layer), "field 'units[1].last_layer': expected an integer in 1..6"));
}

TEST_CASE("input limits: a step's micro-batches x layers and bytes are bounded before lowering") {
  const shardplan::ModelSpec model = shardplan::preset_model("tiny-llama");
  shardplan::TrainingConfig training;
  training.seq_len = 64;
  training.precision = shardplan::precision_recipe("fp32");
  shardplan::Plan plan = shardplan::default_plan(model, training, shardplan::parse_strategy("full_shard"),
                                                 shardplan::parse_units_policy("per-block", model), 2);
  CHECK_NOTHROW(shardplan::validate_step_size(plan, model));
  // Reverted (no validate_step_size): 10^9 micro-batches ran > 10 s and 1-2 GB, then bad_alloc.
  plan.grad_accumulation_steps = 1'000'000'000;
  CHECK(contains(input_error_message([&] { shardplan::validate_step_size(plan, model); }),
                 "layer passes per step: expected at most 131072"));
  plan.grad_accumulation_steps = 131072 / static_cast<int>(model.layers.size());
  CHECK_NOTHROW(shardplan::validate_step_size(plan, model));
  plan.grad_accumulation_steps += 1;
  CHECK_THROWS_AS(shardplan::validate_step_size(plan, model), InputError);
  // The global batch's micro-batches per step are bounded where they are computed (estimate --global-batch 1e9).
  training.global_batch = 1'000'000'000;
  CHECK(contains(input_error_message([&] { (void)training.grad_accumulation_steps(8); }),
                 "125000000 micro-batches per step"));
}

TEST_CASE("input limits: a micro-batch whose bytes pass 2^60 is refused before any schedule is made") {
  // Reverted (no byte bound in validate_training): the lowering's int64 bytes overflowed in the simulator's sums and
  // the search's memory floor (UBSan: simulator.cpp:278, wrap_memory_floor.h:31).
  const json document = json::parse(R"({"architecture": {"vocab_size": 256, "hidden_size": 1000000,
      "num_layers": 2, "num_heads": 100000, "max_position_embeddings": 16777216}})");
  const shardplan::ModelSpec model = shardplan::model_from_json(document, "m.json");
  shardplan::TrainingConfig training;
  training.seq_len = 16777216;
  training.micro_batch = 256;  // 2^32 tokens, the most a micro-batch may have
  training.flash_attention = false;
  CHECK(contains(input_error_message([&] { shardplan::validate_training(training, model); }),
                 "--micro-batch: a step of model 'custom-model' at seq-len 16777216, micro-batch 256 x 1 could allocate"));
  training.seq_len = 1024;
  training.micro_batch = 1;
  CHECK_NOTHROW(shardplan::validate_training(training, model));
}

TEST_CASE("input limits: a plan search's work is bounded before it starts") {
  const shardplan::ModelSpec model = shardplan::preset_model("llama3-8b");
  shardplan::TrainingConfig training;
  training.global_batch = 1024;  // 128 micro-batches per step on 8 ranks: 35 x 130 layer passes
  CHECK_NOTHROW(shardplan::check_search_work(training, model, 8, "plan"));
  training.global_batch = 1 << 20;
  CHECK(contains(input_error_message([&] { shardplan::check_search_work(training, model, 8, "plan"); }),
                 "plan: the search would simulate 35 layers x (2 + 131072 micro-batches per step)"));
}

// Issue 31 item 8: ViT-H/14 `plan --global-batch 2048 --micro-batch 32` on 8 GPUs was refused for 256 micro-batches
// per step, though a search that keeps the micro-batch runs 8.
TEST_CASE("input limits: the search work counts the smallest micro-batch the search tries") {
  const shardplan::ModelSpec model = shardplan::preset_model("llama3-8b");  // 35 layers, as ViT-H/14 from its HF config
  shardplan::TrainingConfig training;
  training.global_batch = 2048;
  training.micro_batch = 32;
  CHECK(contains(input_error_message([&] { shardplan::check_search_work(training, model, 8, "plan"); }),
                 "35 layers x (2 + 256 micro-batches per step) = 9030 layer passes"));
  CHECK_NOTHROW(shardplan::check_search_work(training, model, 8, "plan", 32));
  CHECK(contains(input_error_message([&] { shardplan::check_search_work(training, model, 8, "plan", 1); }),
                 "(2 + 256 micro-batches per step)"));
}

TEST_CASE("input limits: model sizes are checked before any product of them") {
  // Reverted (positive_int for head_dim / n_embd): head_dim x num_heads and 4 x n_embd overflowed (UBSan).
  json llama = json::parse(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
      "intermediate_size": 11008, "num_hidden_layers": 2, "num_attention_heads": 32})");
  llama["head_dim"] = 4611686018427387904LL;
  CHECK(contains(input_error_message([&] { shardplan::architecture_from_hf_config(llama, "c.json"); }),
                 "field 'head_dim': expected an integer in 1..1000000"));
  json gpt2 = json::parse(R"({"model_type": "gpt2", "vocab_size": 50257, "n_layer": 2, "n_head": 12})");
  gpt2["n_embd"] = 4611686018427387904LL;
  CHECK(contains(input_error_message([&] { shardplan::architecture_from_hf_config(gpt2, "c.json"); }),
                 "field 'n_embd': expected an integer in 1..1000000"));
  // Reverted (positive_int for an explicit model's hidden_size): 2^63 - 1 printed a negative bound and "FITS".
  json explicit_model = json::parse(R"({"num_heads": 8, "layers": [{"name": "l", "kind": "other", "params": 10}]})");
  explicit_model["hidden_size"] = 9223372036854775807LL;
  CHECK(contains(input_error_message([&] { shardplan::model_from_json(explicit_model, "m.json"); }),
                 "field 'hidden_size': expected an integer in 1..1000000"));
  explicit_model["hidden_size"] = 64;
  explicit_model["layers"][0]["activation_elements_per_token"] = 1e308;
  CHECK(contains(input_error_message([&] { shardplan::model_from_json(explicit_model, "m.json"); }),
                 "activation_elements_per_token': expected a number in [0, 1e+12]"));
}

TEST_CASE("input limits: physical numbers of catalogs, clusters and profiles are in range") {
  const shardplan::HardwareCatalog builtin = shardplan::HardwareCatalog::builtin();
  const auto catalog_error = [&](const json& gpu) {
    shardplan::HardwareCatalog catalog = builtin;
    return input_error_message([&] { catalog.merge_user_json({{"gpus", json::array({gpu})}}, "k.json"); });
  };
  // Reverted (positive numbers only): 1e-300 FLOP/s gave "step_time_s": null, latency 1e308 "step inf s".
  CHECK(contains(catalog_error({{"name", "H100-80GB"}, {"peak_bf16_flops", 1e-300}}),
                 "field 'gpus[0].peak_bf16_flops': expected a number in [1000, 1e+18]"));
  CHECK(contains(catalog_error({{"name", "H100-80GB"}, {"intra_node_latency_s", 1e308}}), "in [0, 1]"));
  CHECK(contains(catalog_error({{"name", "H100-80GB"}, {"price_per_gpu_hour", 1e308}}), "in [0, 1e+06]"));
  const json cluster = {{"gpu", "H100-80GB"}, {"price_per_gpu_hour", 1e308}};
  CHECK(contains(input_error_message([&] { shardplan::cluster_from_json(cluster, "c.json", builtin); }),
                 "field 'price_per_gpu_hour'"));

  const shardplan::HardwareProfile base;
  const auto profile_error = [&](const json& document) {
    return input_error_message([&] { shardplan::apply_profile_json(base, document, "p.json"); });
  };
  const json schema = {{"schema", "shardplan.profile/v1"}};
  json latency = schema;
  latency["communication"] = {{"intra_node", {{"latency_s", 1e308}}}};
  CHECK(contains(profile_error(latency), "field 'communication.intra_node.latency_s'"));
  // Reverted (entry.value(...) in read_collective_fits): a string here threw nlohmann's type_error, exit 1.
  json fits = schema;
  fits["fits"] = {{"collectives", json::array({{{"collective", "all_gather"}, {"ranks", "two"}}})}};
  CHECK(profile_error(fits) == "p.json: field 'fits.collectives[0].ranks': expected an integer in 0..1000000, "
                               "got \"two\"");
  fits["fits"]["collectives"][0] = {{"collective", 5}};
  CHECK(contains(profile_error(fits), "field 'fits.collectives[0].collective'"));
}

TEST_CASE("input limits: a trace's times are bounded, and odd samples never fail calibration internally") {
  const json op = {{"ph", "X"}, {"name", "ag"}, {"ts", 0.0}, {"dur", 1e308}, {"pid", 0}, {"tid", 0}};
  // Reverted (finite only): calibrate failed with "check failed: x(1) > 0", exit 1.
  CHECK(contains(input_error_message([&] { shardplan::from_chrome_trace({{"traceEvents", {op}}}, "t.json"); }),
                 "field 'traceEvents[0].dur': expected a duration in [0, 1e12] (microseconds)"));
  // Samples that moved nothing or took under a nanosecond are not fitted; the rest still give a positive fit.
  const auto gather = shardplan::CollectiveKind::all_gather;
  std::vector<shardplan::CollectiveSample> samples = {{gather, 2, false, 0, 1.0, 0},
                                                      {gather, 2, false, 1024, 1e-300, 0},
                                                      {gather, 2, false, 1024, 1e-3, 0}};
  const shardplan::LinkFit fit = shardplan::fit_link(samples);
  CHECK(fit.samples == 1);
  CHECK(fit.bus_bytes_per_s > 0);
}
