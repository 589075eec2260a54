// CLI tests of the error bands on every prediction (Note [Error bands] in costmodel/error_band.h): plan, estimate and
// simulate print and carry them, and --memory-headroom's default comes from the memory band unless given.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"
#include "run_json.h"

using nlohmann::json;
using shardplan_test::RunResult;
using shardplan_test::run_json;
using shardplan_test::run_shardplan;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The JSON object every command carries: both bands with their runs and group, and the headroom's source.
void check_error_band(const json& band, const std::string& step_group, const std::string& headroom_source) {
  CHECK(band.at("step_time").at("group") == step_group);
  CHECK(band.at("step_time").at("runs").get<int>() >= 5);
  CHECK(band.at("step_time").at("relative_error").get<double>() > 0);
  CHECK(band.at("step_time").at("relative_error").get<double>() < 1);
  CHECK(band.at("memory").at("runs").get<int>() >= 5);
  CHECK(band.at("memory").at("relative_error").get<double>() > 0);
  CHECK(band.at("memory_headroom_source") == headroom_source);
}

}  // namespace

TEST_CASE("`plan` prints the step and memory error bands of published runs like the plan, and --json carries them") {
  const RunResult text = run_shardplan({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB"});
  REQUIRE(text.exit_status == 0);
  CHECK(contains(text.out, "  error band: step "));
  CHECK(contains(text.out, " published runs on H100, multi-node pre-training)\n"));
  CHECK(contains(text.out, "  error band: max_memory_reserved "));
  CHECK(contains(text.out, "headroom 3 % (the memory error band: its largest underestimate, 2.1 % on 7 published "
                           "runs, rounded up)"));
  const json document = run_json({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--json"});
  check_error_band(document.at("error_band"), "on H100, multi-node pre-training", "error band");
  CHECK(document.at("error_band").at("memory_headroom_percent") == 3);
  CHECK(document.at("memory_headroom_fraction").get<double>() == doctest::Approx(0.03));
}

TEST_CASE("`estimate` and `simulate` print the bands, the overall band where no published run is like this one") {
  const RunResult simulate = run_shardplan({"simulate", "-m", "llama3-8b", "-c", "8xA100-80GB"});
  REQUIRE(simulate.exit_status == 0);
  CHECK(contains(simulate.out, "error bands (how far the predictions of published runs like this one were off):\n"));
  CHECK(contains(simulate.out, " published runs on A100, single-node pre-training)\n"));
  CHECK(contains(simulate.out, " published runs, the overall band — none on A100)\n"));  // no A100 run publishes memory
  check_error_band(run_json({"simulate", "-m", "llama3-8b", "-c", "8xA100-80GB", "--json"}).at("error_band"),
                   "on A100, single-node pre-training", "error band");
  const RunResult estimate = run_shardplan({"estimate", "-m", "llama3-8b", "-c", "8xRTX4090", "--cpu-offload"});
  REQUIRE(estimate.exit_status == 0);
  CHECK(contains(estimate.out, "  step "));
  CHECK(contains(estimate.out, " published runs, the overall band — none on RTX4090)\n"));
  const json document = run_json({"estimate", "-m", "llama3-8b", "-c", "8xRTX4090", "--json"});
  check_error_band(document.at("error_band"), "the overall band — none on RTX4090", "error band");
  CHECK(document.at("error_band").at("step_time").at("overall") == true);
}

TEST_CASE("an explicit --memory-headroom overrides the memory band's default, and says so") {
  for (const std::string command : {"plan", "estimate", "simulate"}) {
    CAPTURE(command);
    const json given =
        run_json({command, "-m", "llama3-8b", "-c", "8xH100-80GB", "--memory-headroom", "7", "--json"});
    CHECK(given.at("error_band").at("memory_headroom_percent") == 7);
    CHECK(given.at("error_band").at("memory_headroom_source") == "--memory-headroom");
    const RunResult text = run_shardplan({command, "-m", "llama3-8b", "-c", "8xH100-80GB", "--memory-headroom", "7"});
    CHECK(contains(text.out, "headroom 7 % (--memory-headroom)\n"));
    CHECK_FALSE(contains(text.out, "the memory error band:"));
  }
  // Given as 3, the band's own figure, it is still the user's.
  const json same = run_json({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--memory-headroom", "3", "--json"});
  CHECK(same.at("error_band").at("memory_headroom_source") == "--memory-headroom");
  const json plan = run_json({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--memory-headroom", "7", "--json"});
  CHECK(plan.at("memory_headroom_fraction").get<double>() == doctest::Approx(0.07));
}
