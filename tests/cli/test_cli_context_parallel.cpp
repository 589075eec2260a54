// Tests of context-parallel plans through the binary (Note [Context parallel policy]): `simulate
// --context-parallel` and `plan --context-parallel` keep the degree, their JSON carries it and a plan file
// re-simulates to the same step; a sequence torch cannot split, or a degree with another front end, exits 2 with
// one line.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"
#include "run_json.h"

namespace {

using nlohmann::json;
using namespace shardplan_test;

const std::vector<std::string> kTinyContextParallel = {"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len",
                                                       "64", "--context-parallel", "2"};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

TEST_CASE("`simulate --context-parallel 2`: the degree in the text and the JSON; its plan file re-simulates") {
  const RunResult text = run_shardplan(kTinyContextParallel);
  INFO(text.err);
  REQUIRE(text.exit_status == 0);
  CHECK(text.out.find("x cp 2 x") != std::string::npos);
  const json document = run_json(with(kTinyContextParallel, {"--json"}));
  CHECK(document.at("plan").at("context_parallel_degree") == 2);
  CHECK(document.at("streams").at("p2p").get<double>() > 0);  // the ring's K/V sends
  // One sequence per data-parallel rank: 8 ranks / cp 2 = 4 sequences of 64 tokens.
  CHECK(document.at("tokens_per_step") == 4 * 64);
  const json plain = run_json({"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64", "--json"});
  CHECK_FALSE(plain.at("plan").contains("context_parallel_degree"));
  TempFile plan_file("context-parallel-plan");
  {
    std::ofstream out(plan_file.path());
    out << document.at("plan").dump();
  }
  const json again = run_json({"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--plan", plan_file.path(), "--json"});
  CHECK(again.at("plan").at("context_parallel_degree") == 2);
  CHECK(again.at("step_time_s").get<double>() ==
        doctest::Approx(document.at("step_time_s").get<double>()).epsilon(1e-12));
}

TEST_CASE("`plan --context-parallel 2`: the planned plan keeps the degree and says it was fixed") {
  const std::vector<std::string> args = {"plan", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64",
                                         "--context-parallel", "2", "-j", "1"};
  const RunResult text = run_shardplan(args);
  INFO(text.err);
  REQUIRE(text.exit_status == 0);
  CHECK(text.out.find("context parallel 2: fixed by --context-parallel") != std::string::npos);
  CHECK(text.out.find("CP 2, ") != std::string::npos);
  // 8 ranks, 2 on each sequence: one sequence on each of 4 batch ranks, 4 × 64 tokens.
  CHECK(text.out.find("global batch 4 sequences (256 tokens) per step: micro-batch 1 x 1 accumulation x 4 "
                      "data-parallel ranks, each sequence over cp 2") != std::string::npos);
  const json document = run_json(with(args, {"--json"}));
  CHECK(document.at("context_parallel_degree") == 2);
  CHECK(document.at("plan").at("context_parallel_degree") == 2);
}

TEST_CASE("`--context-parallel`: a sequence torch cannot split, or an export that cannot run it, exits 2") {
  // torch's load-balanced sharding needs seq_len % (2 x cp) == 0: 68 tokens are not 8 chunks.
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "68", "--context-parallel", "4"},
                     {"--context-parallel 4", "multiple of 2 x 4 = 8"});
  expect_input_error({"plan", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "68", "--context-parallel", "4"},
                     {"--context-parallel 4", "multiple of 2 x 4 = 8"});
  // The batch divides over 8 / cp = 4 ranks, said in the user's numbers (the search runs on the ranks' shares).
  expect_input_error({"plan", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64", "--context-parallel", "2",
                      "--global-batch", "3"},
                     {"--global-batch 3", "= 1 × 4 = 4"});
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64", "--context-parallel", "2",
                      "--no-flash-attention"},
                     {"--context-parallel 2", "flash"});
  expect_input_error({"plan", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64", "--context-parallel", "2",
                      "--export", "fsdp2"},
                     {"--context-parallel 2", "--export torchtitan"});
  // Llama 4 (a preset without one decoder architecture) is refused for the layer CP cannot take, not for the preset.
  expect_input_error({"simulate", "-m", "llama4-scout-17b-16e", "-c", "2x8xH100-80GB", "--seq-len", "32768",
                      "--context-parallel", "2"},
                     {"--context-parallel 2", "'vision_model': a vision tower"});
}

// Note [Context-parallel search] (planner/search_context_parallel.cpp): without --context-parallel, cp 2, 4, 8 are
// searched where one sequence per micro-batch still needs checkpointing (llama3.1-8b at 64k tokens on 8 H100s; at
// 32k the ring's repeated K/V and fp32 merges, Note [Ring tensor traffic], cost more than it saves), and not on
// short sequences (llama3-8b at its 8192) or where the best plan needs no checkpointing.
TEST_CASE("`plan` without --context-parallel: the degree searched where a sequence's activations stand in the way") {
  const json long_context =
      run_json({"plan", "-m", "llama3.1-8b", "-c", "8xH100-80GB", "--seq-len", "65536", "--json"});
  REQUIRE(long_context.at("feasible") == true);
  CHECK(long_context.at("context_parallel_search").at("searched") == json::array({2, 4, 8}));
  const int degree = long_context.at("context_parallel_degree");
  CHECK(degree > 1);
  CHECK(long_context.at("plan").at("context_parallel_degree") == degree);
  // Equal global batch (Note [Equal global batch]): 8 sequences, whatever the degree.
  CHECK(long_context.at("predicted").at("tokens_per_step") == 8 * 65536);
  // Faster than the best plan of cp 1, pinned.
  const json without = run_json({"plan", "-m", "llama3.1-8b", "-c", "8xH100-80GB", "--seq-len", "65536",
                                 "--context-parallel", "1", "--json"});
  CHECK(long_context.at("predicted").at("step_time_s").get<double>() <
        without.at("predicted").at("step_time_s").get<double>());
  const RunResult short_context = run_shardplan({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB"});
  REQUIRE(short_context.exit_status == 0);
  CHECK(short_context.out.find("context parallel: not searched (sequences under 16384 tokens") != std::string::npos);
  const RunResult unneeded = run_shardplan({"plan", "-m", "llama3.1-8b", "-c", "64x8xH100-80GB", "--seq-len",
                                            "16384", "--tensor-parallel", "8"});
  REQUIRE(unneeded.exit_status == 0);
  CHECK(unneeded.out.find("context parallel: not searched (the best plan without it runs") != std::string::npos);
}
