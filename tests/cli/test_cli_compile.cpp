// Tests of `--compile` beyond the fsdp2 export (Note [Exported compile]): fsdp1 compiles each block, deepspeed and
// `run` refuse a compiled plan in one line, exit 2, leaving no file behind.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace {

using shardplan_test::expect_input_error;
using shardplan_test::RunResult;
using shardplan_test::run_shardplan;
using shardplan_test::scratch;
using shardplan_test::TempFile;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

// `plan` of tiny-llama (4 blocks, model.layers.0-3) on 4 CPU ranks, with `extra` flags appended.
std::vector<std::string> plan_command(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"plan", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The one file `plan --export format` writes, with or without --compile.
std::string exported(const std::string& format, bool compiled, const std::string& file) {
  const auto dir = scratch("compile-export-" + format + (compiled ? "-on" : "-off"));
  std::vector<std::string> extra = {"--export", format, "--out-dir", dir.string()};
  if (compiled) extra.push_back("--compile");
  const RunResult result = run_shardplan(plan_command(extra));
  INFO(result.err);
  REQUIRE(result.exit_status == 0);
  const std::string text = read(dir / file);
  std::filesystem::remove_all(dir);
  return text;
}

}  // namespace

TEST_CASE("`plan --compile --export fsdp1` compiles each block after wrapping and AC, with use_orig_params=True") {
  const std::string script = exported("fsdp1", true, "fsdp1_plan.py");
  CHECK(contains(script,
                 "COMPILED_BLOCKS = [\"model.layers.0\", \"model.layers.1\", \"model.layers.2\", \"model.layers.3\"]"));
  CHECK(contains(script, "wrappers.get(block, block).compile(fullgraph=True)"));
  CHECK(contains(script, "use_orig_params=True,"));
  CHECK(contains(script, "torch.compile traces FSDP1 modules only with True"));
  // Compiled last: after wrapping and after every activation-checkpointing pass (the wrapper is what gets compiled).
  const auto call = script.find("    _compile_blocks(model, compiled)");
  REQUIRE(call != std::string::npos);
  CHECK(script.find("FullyShardedDataParallel(model, auto_wrap_policy") < call);
  CHECK(script.rfind("check_fn=lambda module: module in selective_op)") < call);
  CHECK(script.find("compiled = [model.get_submodule(path) for path in COMPILED_BLOCKS]") <
        script.find("    _regroup_layers(model)"));  // found by path before regrouping moves them

  const std::string eager = exported("fsdp1", false, "fsdp1_plan.py");
  CHECK_FALSE(contains(eager, "COMPILED_BLOCKS"));
  CHECK_FALSE(contains(eager, "_compile_blocks"));
  CHECK_FALSE(contains(eager, ".compile("));
  // The fsdp2 export still compiles each block before fully_shard.
  CHECK(contains(exported("fsdp2", true, "fsdp2_plan.py"), "torch.compile(model.get_submodule(path), fullgraph=True)"));
}

TEST_CASE("`plan --compile --export deepspeed` and fsdp1 without use_orig_params refuse in one line, writing nothing") {
  const auto dir = scratch("compile-refused");
  const std::string out = (dir / "p.json").string();
  expect_input_error(plan_command({"--compile", "--export", "deepspeed", "--out-dir", dir.string(), "--out", out}),
                     {"--export deepspeed", "training.torch_compile", "--compile", "ds_config.json cannot express",
                      "engine.compile()", "expected --export fsdp2 or fsdp1, or a plan without --compile"});
  expect_input_error(plan_command({"--compile", "--fsdp-version", "1", "--use-orig-params", "false", "--export",
                                   "fsdp1", "--out-dir", dir.string(), "--out", out}),
                     {"--export fsdp1", "training.torch_compile", "use_orig_params false",
                      "expected --use-orig-params true, or a plan without --compile"});
  CHECK(std::filesystem::is_empty(dir));  // no plan, no script, no ds_config.json (Note [Output files])
  // The same exports of the eager plan are written: the refusal is the compile's, not the flags'.
  const RunResult eager = run_shardplan(plan_command({"--export", "deepspeed", "--out-dir", dir.string()}));
  INFO(eager.err);
  CHECK(eager.exit_status == 0);
  CHECK(nlohmann::json::parse(read(dir / "ds_config.json")).at("zero_optimization").at("stage") == 3);
  std::filesystem::remove_all(dir);
}

TEST_CASE("`run` refuses a plan with training.torch_compile in one line: the runners execute eager kernels") {
  TempFile plan_file("compiled-run-plan");
  const RunResult planned = run_shardplan(plan_command({"--compile", "--precision", "fp32", "--out", plan_file.path()}));
  INFO(planned.err);
  REQUIRE(planned.exit_status == 0);
  REQUIRE(nlohmann::json::parse(plan_file.contents()).at("training").at("torch_compile") == true);
  if (!shardplan_test::mpi_build()) {
    MESSAGE("this shardplan was built without MPI (`run` is missing): only the plan was checked");
    return;
  }
  for (const char* device : {"cpu", "auto"}) {
    CAPTURE(device);
    expect_input_error({"run", "--plan", plan_file.path(), "--device", device, "--steps", "1"},
                       {plan_file.path() + ": ", "training.torch_compile is set (planned with --compile)",
                        "eager kernels", "re-plan without --compile"});
  }
  // `run` has no --compile of its own: the default plan is eager, and the flag is an unknown argument (exit 2).
  const RunResult flag = run_shardplan({"run", "--compile", "--steps", "1"});
  CHECK(flag.exit_status == 2);
  CHECK(contains(flag.err, "--compile"));
}
