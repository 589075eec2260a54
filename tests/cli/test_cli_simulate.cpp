// Tests of `shardplan simulate` through the binary: the JSON contract, trace and report files, bad plans.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace {

using nlohmann::json;
using shardplan_test::RunResult;
using shardplan_test::run_shardplan;
using shardplan_test::expect_input_error;
using shardplan_test::TempFile;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A tiny-llama plan with one root and two units; `units` replaces the units array.
std::string plan_text(const std::string& units) {
  return R"({"schema": "shardplan.plan/v1", "name": "t", "training": {"seq_len": 64}, "units": [)" + units + "]}";
}

void expect_bad_plan(const std::string& units, const std::string& cluster, const std::string& expected) {
  TempFile plan("plan", plan_text(units));
  const RunResult result = run_shardplan({"simulate", "-m", "tiny-llama", "-c", cluster, "--plan", plan.path()});
  INFO("stderr: " << result.err);
  CHECK(result.exit_status == 2);
  CHECK(result.out.empty());
  REQUIRE(result.err_lines().size() == 1);
  CHECK(contains(result.err, "shardplan: error:"));
  CHECK(contains(result.err, expected));
}

}  // namespace

// Both commands against llama3-8b's peak derived by hand, term by term, in tests/unit/test_simulator.cpp (Note
// [Hand-derived peak]): comparing the two with each other would compare the simulator with itself, since estimate
// takes its breakdown from the simulated schedule.
TEST_CASE("`simulate --json` has the contract's keys; it and `estimate` give llama3-8b's hand-derived peak") {
  const std::vector<std::string> setting = {"-m", "llama3-8b", "-c", "4x8xH100-80GB", "--seq-len", "2048",
                                            "--ac", "full", "--json"};
  constexpr long long kPeak = 13'989'218'816, kActivations = 4'247'781'376;
  std::vector<std::string> simulate_args = {"simulate"}, estimate_args = {"estimate"};
  simulate_args.insert(simulate_args.end(), setting.begin(), setting.end());
  estimate_args.insert(estimate_args.end(), setting.begin(), setting.end());
  const RunResult simulated = run_shardplan(simulate_args);
  REQUIRE(simulated.exit_status == 0);
  const json summary = json::parse(simulated.out);
  for (const char* key : {"step_time_s", "compute_time_s", "exposed_comm_s", "peak_memory_bytes", "memory_at_peak",
                          "tokens_per_s", "mfu", "hfu", "streams", "collectives"}) {
    CAPTURE(key);
    CHECK(summary.contains(key));
  }
  CHECK(summary.at("schema") == "shardplan.simulation/v1");
  CHECK(summary.at("collectives").at("all_gather").at("count") == 2 * 33 - 1);
  CHECK(summary.at("collectives").at("reduce_scatter").at("count") == 33);
  CHECK(summary.at("mfu").get<double>() > 0.0);
  CHECK(summary.at("mfu").get<double>() < 1.0);
  CHECK(summary.at("peak_memory_bytes") == kPeak);
  CHECK(summary.at("memory_at_peak").at("activations_bytes") == kActivations);
  const RunResult estimated = run_shardplan(estimate_args);
  REQUIRE(estimated.exit_status == 0);
  const json memory = json::parse(estimated.out).at("memory");
  CHECK(memory.at("total_bytes") == kPeak);
  CHECK(memory.at("activations_bytes") == kActivations);
}

TEST_CASE("`simulate --trace --report` writes a Chrome trace and an offline HTML report") {
  const auto dir = std::filesystem::temp_directory_path() / ("shardplan-sim-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string trace = (dir / "t.json").string(), report = (dir / "r.html").string();
  const RunResult result = run_shardplan({"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--seq-len", "64", "--trace",
                                          trace, "--report", report});
  REQUIRE(result.exit_status == 0);
  CHECK(contains(result.out, "step time"));
  std::ifstream trace_stream(trace);
  const json document = json::parse(trace_stream);
  CHECK(document.at("traceEvents").size() > 10);
  std::ifstream report_stream(report);
  const std::string html((std::istreambuf_iterator<char>(report_stream)), std::istreambuf_iterator<char>());
  CHECK(contains(html, "<svg"));
  CHECK_FALSE(contains(html, "http"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("`simulate` with a bad plan names the unit and exits 2, writing nothing") {
  const std::string root = R"({"root": true})";
  expect_bad_plan(root + R"(, {"first_layer": 1, "last_layer": 2}, {"first_layer": 2, "last_layer": 3})", "2xcpu",
                  "unit 2");
  expect_bad_plan(root + R"(, {"first_layer": 1, "last_layer": 2, "forward_prefetch": [9]})", "2xcpu", "unit 1");
  expect_bad_plan(root + R"(, {"first_layer": 1, "last_layer": 2, "strategy": "hybrid_shard:3"})", "4xcpu",
                  "unit 1");
  expect_bad_plan(R"({"first_layer": 1, "last_layer": 2})", "2xcpu", "unit 0");
  const auto trace = std::filesystem::temp_directory_path() / ("shardplan-none-" + std::to_string(::getpid()) + ".json");
  TempFile plan("plan", plan_text(root + R"(, {"first_layer": 1, "forward_prefetch": [7]})"));
  const RunResult result = run_shardplan({"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--plan", plan.path(),
                                          "--trace", trace.string()});
  CHECK(result.exit_status == 2);
  CHECK_FALSE(std::filesystem::exists(trace));
}

// A plan runs on the model it was made for (its JSON names it), and the default plan's flags beside a plan file are
// said to be ignored, not silently dropped.
TEST_CASE("`simulate --plan` refuses another model's plan and says which default-plan flags it ignores") {
  const std::string per_block = "examples/plans/tiny-llama-per-block.json";
  expect_input_error({"simulate", "-m", "gpt2", "-c", "2xcpu", "--plan", per_block},
                     {"tiny-llama-per-block.json: field 'model'", "expected 'gpt2'", "\"tiny-llama\""});
  const RunResult alone = run_shardplan({"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--plan", per_block});
  REQUIRE(alone.exit_status == 0);
  CHECK(alone.err.empty());
  const RunResult flagged = run_shardplan({"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--plan", per_block,
                                           "--micro-batch", "4", "--strategy", "no_shard"});
  REQUIRE(flagged.exit_status == 0);
  CHECK(flagged.err.find("warning: --strategy, --micro-batch: ignored beside --plan") != std::string::npos);
  CHECK(flagged.out == alone.out);
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "2xcpu", "--plan", per_block, "--context-parallel", "2"},
                     {"--context-parallel", "expected no --context-parallel with --plan"});
}
