// Tests of `shardplan plan` and `shardplan capacity` through the binary: JSON contract, exports, exit 3, bad input.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_skip.h"
#include "run_binary.h"

namespace {

using nlohmann::json;
using shardplan_test::RunResult;
using shardplan_test::run_shardplan;
using shardplan_test::scratch;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Writes the three exports of a small plan into `dir`.
void export_all(const std::filesystem::path& dir) {
  for (const char* format : {"fsdp2", "fsdp1", "deepspeed"}) {
    CAPTURE(format);
    const RunResult result = run_shardplan({"plan", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64", "--export",
                                            format, "--out-dir", dir.string()});
    INFO(result.err);
    REQUIRE(result.exit_status == 0);
  }
}

}  // namespace

TEST_CASE("`plan --json`: plan, predicted, baselines and search; the plan re-simulates to the same numbers") {
  const auto dir = scratch("plan");
  const std::string out = (dir / "p.json").string();
  const RunResult result = run_shardplan({"plan", "-m", "llama2-7b", "-c", "8xA100-80GB", "--seq-len", "4096",
                                          "--json", "--out", out});
  INFO(result.err);
  REQUIRE(result.exit_status == 0);
  const json document = json::parse(result.out);
  for (const char* key : {"plan", "predicted", "baselines", "search"}) CHECK(document.contains(key));
  CHECK(document.at("baselines").size() == 3);
  CHECK(document.at("search").at("candidates_evaluated").get<int>() > 0);
  const RunResult again = run_shardplan({"simulate", "-m", "llama2-7b", "-c", "8xA100-80GB", "--plan", out, "--json"});
  REQUIRE(again.exit_status == 0);
  CHECK(json::parse(again.out).at("step_time_s").get<double>() ==
        doctest::Approx(document.at("predicted").at("step_time_s").get<double>()).epsilon(1e-12));
  std::filesystem::remove_all(dir);
}

TEST_CASE("`plan --export` writes the FSDP2 and FSDP1 scripts and a DeepSpeed config that parses as JSON") {
  const auto dir = scratch("export");
  export_all(dir);
  for (const char* file : {"fsdp2_plan.py", "fsdp1_plan.py"}) CHECK(std::filesystem::file_size(dir / file) > 0);
  std::ifstream config_stream(dir / "ds_config.json");
  CHECK(json::parse(config_stream).at("zero_optimization").contains("stage"));
  std::filesystem::remove_all(dir);
}

// Its own Meson test (cli-plan-export-python): without python3 it skips visibly (Note [Visible skips]).
TEST_CASE("`plan --export` files compile as Python (py_compile)" * doctest::test_suite("can-skip")) {
  if (std::system("python3 --version > /dev/null 2>&1") != 0) SKIP_CASE("python3 is not on PATH: py_compile not run");
  const auto dir = scratch("export-python");
  export_all(dir);
  for (const char* file : {"fsdp2_plan.py", "fsdp1_plan.py"}) {
    CAPTURE(file);
    const std::string command = "python3 -m py_compile " + (dir / file).string();
    CHECK(std::system(command.c_str()) == 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("`plan` exits 3 with a diagnosis when nothing fits, and 2 on bad input") {
  const RunResult infeasible = run_shardplan({"plan", "-m", "llama3-70b", "-c", "8xH100-80GB", "--memory-cap", "2"});
  CHECK(infeasible.exit_status == 3);
  CHECK(contains(infeasible.out, "NO PLAN FITS"));
  CHECK(contains(infeasible.out, "Dominant memory term"));
  const RunResult json_infeasible =
      run_shardplan({"plan", "-m", "llama3-70b", "-c", "8xH100-80GB", "--memory-cap", "2", "--json"});
  CHECK(json_infeasible.exit_status == 3);
  CHECK_FALSE(json::parse(json_infeasible.out).at("feasible").get<bool>());
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"plan", "-m", "gpt2", "-c", "8xA100-80GB", "--objective", "fast"},
           {"plan", "-m", "gpt2", "-c", "8xA100-80GB", "--export", "fsdp3"},
           {"plan", "-m", "gpt2", "-c", "8xA100-80GB", "--memory-cap", "-4"},
           {"capacity", "-m", "gpt2", "--gpus", "H100-8GB"},
           {"capacity", "-m", "gpt2", "--tokens", "0"}}) {
    const RunResult bad = run_shardplan(args);
    INFO(bad.err);
    CHECK(bad.exit_status == 2);
    CHECK(bad.err_lines().size() == 1);
  }
  CHECK(contains(run_shardplan({"plan", "-m", "gpt2", "-c", "8xA100-80GB", "--export", "fsdp3"}).err, "fsdp2"));
}

TEST_CASE("`capacity --json`: a point per GPU type and count, smallest fitting count, a Pareto front") {
  const RunResult result = run_shardplan({"capacity", "-m", "llama2-7b", "--gpus", "A100-40GB,H100-80GB", "--min-gpus",
                                          "8", "--max-gpus", "64", "--seq-len", "4096", "--ac", "full", "--json"});
  INFO(result.err);
  REQUIRE(result.exit_status == 0);
  const json document = json::parse(result.out);
  CHECK(document.at("schema") == "shardplan.capacity/v1");
  CHECK(document.at("points").size() == 2 * 4);  // 8, 16, 32, 64 each
  int pareto = 0;
  for (const auto& point : document.at("points")) {
    if (point.at("fits").get<bool>()) {
      CHECK(point.at("days").get<double>() > 0);
      CHECK(point.at("cost_usd").get<double>() > 0);
    }
    pareto += point.at("pareto").get<bool>() ? 1 : 0;
  }
  CHECK(pareto >= 1);
  CHECK(document.at("smallest_fitting_gpus").at("H100-80GB").get<int>() == 8);
}

TEST_CASE("`capacity --profile`: a calibrated profile changes the points of its own GPU type only") {
  const auto dir = scratch("capacity-profile");
  const std::string profile = (dir / "h100.json").string();
  {
    // A profile measured on H100-80GB at a quarter of the catalog's bf16 peak.
    std::ofstream out(profile);
    out << R"({"schema": "shardplan.profile/v1", "device": "H100-80GB", "compute": {"peak_bf16_flops": 2.5e14}})";
  }
  const std::vector<std::string> sweep = {"capacity", "-m", "llama2-7b", "--gpus", "A100-80GB,H100-80GB",
                                          "--min-gpus", "8", "--max-gpus", "8", "--json"};
  const RunResult plain = run_shardplan(sweep);
  std::vector<std::string> calibrated_args = sweep;
  calibrated_args.insert(calibrated_args.end(), {"--profile", profile});
  const RunResult calibrated = run_shardplan(calibrated_args);
  INFO(plain.err, calibrated.err);
  REQUIRE(plain.exit_status == 0);
  REQUIRE(calibrated.exit_status == 0);
  const auto step_time = [](const RunResult& result, const std::string& gpu) {
    const json document = json::parse(result.out);  // kept alive: the loop iterates over a reference into it
    for (const auto& point : document.at("points")) {
      if (point.at("gpu") == gpu) return point.at("step_time_s").get<double>();
    }
    return -1.0;
  };
  CHECK(step_time(calibrated, "A100-80GB") == doctest::Approx(step_time(plain, "A100-80GB")));
  CHECK(step_time(calibrated, "H100-80GB") > 1.5 * step_time(plain, "H100-80GB"));

  const RunResult wrong_gpu = run_shardplan({"capacity", "-m", "llama2-7b", "--gpus", "A100-80GB", "--max-gpus", "8",
                                             "--profile", profile});
  CHECK(wrong_gpu.exit_status == 2);
  CHECK(contains(wrong_gpu.err, "device"));
  std::filesystem::remove_all(dir);
}
