// Tests of 2-D (TP x FSDP) and float8 plans through the binary: a TP plan's file re-simulates, `run` refuses TP and
// fp8 plans, and bad --tensor-parallel or fp8 on a GPU without it exit 2 with one line.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace {

using nlohmann::json;
using shardplan_test::expect_input_error;
using shardplan_test::RunResult;
using shardplan_test::run_shardplan;
using shardplan_test::TempFile;

}  // namespace

TEST_CASE("`plan --tensor-parallel 2`: the plan says its degree and re-simulates to the same step; run refuses it") {
  TempFile plan_file("tp-plan");
  const RunResult planned = run_shardplan({"plan", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64",
                                           "--tensor-parallel", "2", "--json", "--out", plan_file.path()});
  INFO(planned.err);
  REQUIRE(planned.exit_status == 0);
  const json document = json::parse(planned.out);
  CHECK(document.at("plan").at("tensor_parallel_degree") == 2);
  const double step_s = document.at("predicted").at("step_time_s").get<double>();
  const RunResult again = run_shardplan({"simulate", "-m", "tiny-llama", "-c", "4xcpu", "--plan", plan_file.path(),
                                         "--json"});
  INFO(again.err);
  REQUIRE(again.exit_status == 0);
  CHECK(json::parse(again.out).at("step_time_s").get<double>() == doctest::Approx(step_s).epsilon(1e-12));
  // One process without mpirun is a world of 1, which a TP group of 2 cannot fit: refused before the runner's own
  // check (check_executable: "not yet executed"), still in one line.
  expect_input_error({"run", "-m", "tiny-llama", "--plan", plan_file.path(), "--device", "cpu", "--steps", "1"},
                     {"tensor_parallel_degree 2"});
}

TEST_CASE("bad tensor-parallel and fp8 input: one line naming the flag, exit 2") {
  expect_input_error({"plan", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64", "--tensor-parallel", "3"},
                     {"--tensor-parallel 3: expected a power of two"});
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64", "--tensor-parallel", "8"},
                     {"--tensor-parallel 8: expected a divisor of the 4 GPUs per node"});
  expect_input_error({"simulate", "-m", "llama3-8b", "-c", "8xA100-80GB", "--precision", "fp8-tensorwise"},
                     {"no float8 tensor-core rate for GPU 'A100-80GB'"});
  const RunResult h100 = run_shardplan({"simulate", "-m", "llama3-8b", "-c", "8xH100-80GB", "--seq-len", "8192",
                                        "--precision", "fp8-tensorwise", "--json"});
  INFO(h100.err);
  CHECK(h100.exit_status == 0);
}

TEST_CASE("`--compile`: kept activations shrink, the plan carries torch_compile, TP above 1 is refused in one line") {
  const std::vector<std::string> base = {"estimate", "-m", "llama3-8b", "-c", "8xH100-80GB", "--seq-len", "4096",
                                         "--ac", "selective-op", "--json"};
  std::vector<std::string> compiled = base;
  compiled.push_back("--compile");
  const RunResult eager_run = run_shardplan(base);
  const RunResult compiled_run = run_shardplan(compiled);
  INFO(eager_run.err, compiled_run.err);
  REQUIRE(eager_run.exit_status == 0);
  REQUIRE(compiled_run.exit_status == 0);
  const json eager = json::parse(eager_run.out), with_compile = json::parse(compiled_run.out);
  CHECK_FALSE(eager.at("training").contains("torch_compile"));
  CHECK(with_compile.at("training").at("torch_compile") == true);
  // Note [Compiled blocks]: a block's down_proj output (h = 4096 per token, 2 bytes, 4096 tokens) is not kept.
  const auto block_kept = [](const json& document) {
    return document.at("layers").at(1).at("kept_activation_bytes").get<std::int64_t>();
  };
  CHECK(block_kept(eager) - block_kept(with_compile) == 4096 * 4096 * 2);
  TempFile plan_file("compiled-plan");
  const RunResult planned = run_shardplan({"plan", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64",
                                           "--tensor-parallel", "auto", "--compile", "--json", "--out",
                                           plan_file.path()});
  INFO(planned.err);
  REQUIRE(planned.exit_status == 0);
  CHECK(json::parse(planned.out).at("plan").at("training").at("torch_compile") == true);
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64", "--tensor-parallel", "2",
                      "--compile"},
                     {"--compile with --tensor-parallel 2"});
}

// Note [Export constrains the search]: before, `--export fsdp1` searched, printed a TP 2 plan, then exited 2.
TEST_CASE("`plan --export fsdp1` searches TP 1 only and writes the plan it prints; a pinned TP is refused up front") {
  const auto dir = shardplan_test::scratch("tp-export-fsdp1");
  const std::vector<std::string> base = {"plan", "-m", "llama2-13b", "-c", "8xA100-40GB", "--export", "fsdp1",
                                         "--out-dir", dir.string()};
  std::vector<std::string> searched = base;
  searched.push_back("--json");
  const RunResult planned = run_shardplan(searched);
  INFO(planned.err);
  REQUIRE(planned.exit_status == 0);
  CHECK(json::parse(planned.out).at("plan").value("tensor_parallel_degree", 1) == 1);
  CHECK(std::filesystem::exists(dir / "fsdp1_plan.py"));
  std::vector<std::string> pinned = base;
  pinned.insert(pinned.end(), {"--tensor-parallel", "2"});
  expect_input_error(pinned, {"--tensor-parallel 2 with --export fsdp1", "FSDP1 has no tensor parallelism"});
  std::filesystem::remove_all(dir);
}
