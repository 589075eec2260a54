// Tests of MoE models through the binary (issue 17, must-show 3): Mixtral-8x7B on 8 x H100-80GB — memory by
// category and the all-gathers carrying every expert, the plan with and without an expert-parallel group — and
// `run` refusing an expert-parallel plan in one line.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"
#include "run_json.h"

namespace {

using nlohmann::json;
using shardplan_test::expect_input_error;
using shardplan_test::RunResult;
using shardplan_test::run_json;
using shardplan_test::run_shardplan;
using shardplan_test::TempFile;

const std::vector<std::string> kMixtral = {"-m", "examples/hf/mixtral-8x7b.json", "-c", "8xH100-80GB", "--seq-len",
                                           "4096"};

std::vector<std::string> command(const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> args = {name};
  args.insert(args.end(), kMixtral.begin(), kMixtral.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// A two-block Mixtral small enough for CPU ranks.
const std::string kTinyMixtral =
    R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
        "num_experts_per_tok": 2, "max_position_embeddings": 256})";

}  // namespace

TEST_CASE("`estimate` Mixtral-8x7B on 8xH100-80GB: memory by category, all-gathers of every parameter incl. experts") {
  const json estimate = run_json(command("estimate", {"--ac", "full", "--json"}));
  CHECK(estimate["params"] == 46'702'792'704);
  for (const char* term : {"sharded_params_bytes", "sharded_grads_bytes", "optimizer_states_bytes",
                           "unsharded_params_bytes", "activations_bytes"}) {
    CAPTURE(term);
    CHECK(estimate["memory"][term].get<std::int64_t>() > 0);
  }
  // FSDP alone: 32 block units gathered twice (forward, backward), the root once; 2 bytes per parameter, all 8
  // experts of every block included. Blocks hold 46,702,792,704 - 262,148,096 (embeddings, norm, lm_head).
  const std::int64_t root = 2LL * 32'000 * 4'096 + 4'096;
  const std::int64_t blocks = 46'702'792'704 - root;
  CHECK(estimate["collectives_per_step"]["all_gather"]["count"] == 65);
  CHECK(estimate["collectives_per_step"]["all_gather"]["bytes"] == 2 * (2 * blocks + root));
  CHECK_FALSE(estimate["collectives_per_step"].contains("all_to_all"));

  // With an expert-parallel group of 8, each rank gathers its own expert of each block and exchanges tokens.
  const json with_ep = run_json(command("estimate", {"--ac", "full", "--expert-parallel", "8", "--json"}));
  const std::int64_t remote_experts = 32LL * 7 * 3 * 4'096 * 14'336;
  CHECK(with_ep["collectives_per_step"]["all_gather"]["bytes"] == 2 * (2 * (blocks - remote_experts) + root));
  CHECK(with_ep["collectives_per_step"]["all_to_all"]["count"] == 32 * 6);
  CHECK(with_ep["training"]["expert_parallel_degree"] == 8);
  CHECK(with_ep["memory"]["unsharded_params_bytes"].get<std::int64_t>() <
        estimate["memory"]["unsharded_params_bytes"].get<std::int64_t>());
}

TEST_CASE("`plan` Mixtral-8x7B: the expert-parallel degree is searched, or fixed by --expert-parallel") {
  TempFile plan_file("mixtral-ep-plan");
  const json searched = run_json(command("plan", {"--json", "--out", plan_file.path()}));
  REQUIRE(searched["feasible"] == true);
  const int degree = searched["plan"]["training"].value("expert_parallel_degree", 1);
  CHECK(searched["knobs"].get<std::string>().find("expert parallel " + std::to_string(degree)) != std::string::npos);

  const json alone = run_json(command("plan", {"--json", "--expert-parallel", "1"}));
  REQUIRE(alone["feasible"] == true);
  CHECK_FALSE(alone["plan"]["training"].contains("expert_parallel_degree"));
  // The search over degrees includes 1, so its plan is at least as fast.
  CHECK(searched["predicted"]["step_time_s"].get<double>() <= alone["predicted"]["step_time_s"].get<double>());

  // The written plan re-simulates with its degree.
  const json simulated = run_json({"simulate", "-m", "examples/hf/mixtral-8x7b.json", "-c", "8xH100-80GB", "--plan",
                                   plan_file.path(), "--json"});
  CHECK(simulated["step_time_s"].get<double>() == doctest::Approx(searched["predicted"]["step_time_s"].get<double>()));
}

TEST_CASE("`run` refuses an expert-parallel plan up front with one line; EP needs a model with experts") {
  TempFile plan_file("tiny-mixtral-ep-plan");
  const RunResult planned = run_shardplan({"plan", "-m", kTinyMixtral, "-c", "2xcpu", "--seq-len", "64",
                                           "--precision", "fp32", "--expert-parallel", "2", "--out", plan_file.path()});
  INFO(planned.err);
  REQUIRE(planned.exit_status == 0);
  if (shardplan_test::mpi_build()) {
    expect_input_error({"run", "-m", kTinyMixtral, "--plan", plan_file.path(), "--device", "cpu", "--steps", "1"},
                       {"expert parallelism (expert_parallel_degree 2)", "not yet executed"});
  }
  expect_input_error({"estimate", "-m", "llama3-8b", "-c", "8xH100-80GB", "--expert-parallel", "2"},
                     {"--expert-parallel 2", "the model has no experts"});
  expect_input_error(command("estimate", {"--expert-parallel", "3"}), {"--expert-parallel 3", "divisor of the 8 experts"});
}

// Note [Export constrains the search] (planner/export_support.cpp): no export writes expert parallelism, so
// `plan --export` searches EP 1 only and writes the plan it prints (before: EP 8 printed, FSDP alone written, 86 GiB).
TEST_CASE("`plan --export fsdp2` on Mixtral-8x7B prints and writes an EP 1 plan; a pinned EP is refused up front") {
  const auto dir = shardplan_test::scratch("moe-export");
  const std::vector<std::string> two_nodes = {"plan", "-m", "examples/hf/mixtral-8x7b.json", "-c", "2x8xH100-80GB",
                                              "--seq-len", "4096", "--export", "fsdp2", "--out-dir", dir.string()};
  std::vector<std::string> searched = two_nodes;
  searched.push_back("--json");
  const json planned = run_json(searched);
  REQUIRE(planned["feasible"] == true);
  CHECK_FALSE(planned["plan"]["training"].contains("expert_parallel_degree"));
  CHECK(planned["knobs"].get<std::string>().find("expert parallel") == std::string::npos);
  CHECK(std::filesystem::exists(dir / "fsdp2_plan.py"));
  std::vector<std::string> pinned = two_nodes;
  pinned.insert(pinned.end(), {"--expert-parallel", "8"});
  expect_input_error(pinned, {"--expert-parallel 8 with --export fsdp2", "expected --expert-parallel 1"});
  std::filesystem::remove_all(dir);
}
