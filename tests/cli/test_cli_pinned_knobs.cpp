// Tests of Note [Pinned knobs] through the binary (`plan`, `capacity`: a knob given is fixed, one left out searched)
// and of the global batch and speed-ups of `plan` with tensor parallelism (Note [Equal global batch]).
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"
#include "run_json.h"

namespace {

using nlohmann::json;
using shardplan_test::RunResult;
using shardplan_test::run_json;
using shardplan_test::run_shardplan;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> tiny_plan(std::vector<std::string> extra) {
  std::vector<std::string> args = {"plan", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Every transformer block's checkpointing in a plan JSON: units' "ac_layers" less the root's embedding and head.
std::set<std::string> block_modes(const json& plan) {
  std::set<std::string> modes;
  for (const json& unit : plan.at("units")) {
    if (unit.at("root").get<bool>()) continue;
    for (const json& mode : unit.at("ac_layers")) modes.insert(mode.get<std::string>());
  }
  return modes;
}

void expect_refused(const std::vector<std::string>& args, const std::string& message) {
  const RunResult result = run_shardplan(args);
  INFO(result.err);
  CHECK(result.exit_status == 2);
  CHECK(contains(result.err, message));
  CHECK(result.err.find('\n') == result.err.size() - 1);  // one line
  CHECK(result.out.empty());
}

}  // namespace

// Issue 31, item 4: `plan --ac full|none|selective-op` all planned "AC 25%"; `--strategy` was refused by the parser.
// Mutations: knob_settings ignoring pins (each check below fails: the search's own pick comes back).
TEST_CASE("`plan`: each knob given is the planned plan's") {
  CHECK(block_modes(run_json(tiny_plan({"--ac", "full"})).at("plan")) == std::set<std::string>{"full"});
  CHECK(block_modes(run_json(tiny_plan({"--ac", "none"})).at("plan")) == std::set<std::string>{"none"});
  CHECK(block_modes(run_json(tiny_plan({"--ac", "selective-op"})).at("plan")) ==
        std::set<std::string>{"selective-op"});
  const json every = run_json(tiny_plan({"--ac", "full", "--ac-every", "2"})).at("plan");
  CHECK(block_modes(every) == std::set<std::string>{"full", "none"});
  for (const char* strategy : {"shard_grad_op", "no_shard", "hybrid_shard:2"}) {
    CAPTURE(strategy);
    const json plan = run_json(tiny_plan({"--strategy", strategy})).at("plan");
    const std::string kind = std::string(strategy).substr(0, std::string(strategy).find(':'));
    for (const json& unit : plan.at("units")) CHECK(unit.at("strategy").get<std::string>().rfind(kind, 0) == 0);
  }
  const json micro = run_json(tiny_plan({"--global-batch", "16", "--micro-batch", "2"})).at("plan");
  CHECK(micro.at("training").at("micro_batch") == 2);
  CHECK(micro.at("training").at("grad_accumulation_steps") == 2);
  CHECK(run_json(tiny_plan({"--cpu-offload"})).at("plan").at("offload").at("params") == true);
  CHECK(run_json(tiny_plan({"--cpu-offload=false"})).at("plan").at("offload").at("params") == false);
  CHECK(run_json(tiny_plan({"--tensor-parallel", "2"})).at("plan").at("tensor_parallel_degree") == 2);
}

TEST_CASE("`plan`: knobs left out are searched (the search picks a micro-batch other than the given default)") {
  // 16 sequences over 4 ranks: micro-batches 1, 2 and 4 searched; tiny-llama's fastest is the largest.
  const json searched = run_json(tiny_plan({"--global-batch", "16", "--tensor-parallel", "1"}));
  CHECK(searched.at("plan").at("training").at("micro_batch").get<int>() > 1);
  const json pinned = run_json(tiny_plan({"--global-batch", "16", "--tensor-parallel", "1", "--micro-batch", "1"}));
  CHECK(pinned.at("plan").at("training").at("micro_batch") == 1);
}

TEST_CASE("`plan`/`capacity`: contradicting pins refuse in one line, exit 2") {
  expect_refused({"plan", "-m", "tiny-llama", "-c", "4xcpu", "--cpu-offload", "--tensor-parallel", "2"},
                 "--cpu-offload with --tensor-parallel 2: not yet supported");
  expect_refused({"plan", "-m", "tiny-llama", "-c", "4xcpu", "--ac-every", "2"}, "--ac-every 2: only with --ac");
  expect_refused({"plan", "-m", "tiny-llama", "-c", "4xcpu", "--strategy", "ful_shard"}, "--strategy 'ful_shard'");
  expect_refused({"capacity", "-m", "tiny-llama", "--gpus", "cpu", "--tensor-parallel", "two"},
                 "--tensor-parallel 'two': expected auto or a degree");
}

TEST_CASE("`plan --help` and `capacity --help` say which knobs are searched when omitted") {
  for (const char* command : {"plan", "capacity"}) {
    CAPTURE(command);
    const RunResult help = run_shardplan({command, "--help"});
    REQUIRE(help.exit_status == 0);
    for (const char* flag : {"--strategy", "--ac ", "--micro-batch", "--tensor-parallel", "--cpu-offload",
                             "--expert-parallel"}) {
      CAPTURE(flag);
      const auto at = help.out.find(flag);
      REQUIRE(at != std::string::npos);
      const auto next_flag = help.out.find("\n  -", at);
      CHECK(contains(help.out.substr(at, next_flag - at), "searched"));
    }
    CHECK(contains(help.out, "not searched: the recipe given, bf16-mixed when omitted"));
  }
}

// `capacity --ac full` searched every pattern; `--tensor-parallel 1` searched degree 1 twice, `2` searched 1 beside it.
TEST_CASE("`capacity`: pinned knobs restrict every point's search") {
  const json full = run_json({"capacity", "-m", "tiny-llama", "--gpus", "cpu", "--seq-len", "64", "--max-gpus", "8",
                              "--ac", "full", "--strategy", "shard_grad_op", "--json"});
  for (const json& point : full.at("points")) {
    CAPTURE(point.dump());
    REQUIRE(point.at("fits") == true);
    CHECK(contains(point.at("plan").get<std::string>(), "shard_grad_op, AC full,"));
  }
  const json tensor = run_json({"capacity", "-m", "tiny-llama", "--gpus", "cpu", "--seq-len", "64", "--max-gpus",
                                "4", "--tensor-parallel", "2", "--json"});
  for (const json& point : tensor.at("points")) {
    CAPTURE(point.dump());
    if (point.at("gpus") == 1) {  // a degree the point cannot take is why it does not fit, never searched without
      CHECK(point.at("fits") == false);
      CHECK(point.at("limit") == "pinned");
    } else {
      CHECK(contains(point.at("plan").get<std::string>(), "TP 2,"));
    }
  }
}

// Issue 31, item 5: the TP plan ran half the baselines' sequences and the table printed speed-ups from step times.
// Mutations: search_2d not defining the global batch fails the tokens-per-step check; speed-ups from step times
// fail the speed-up check once the plan's step differs from the tokens it runs.
TEST_CASE("`plan` with tensor parallelism: the baselines' global batch, speed-ups in tokens/s, printed") {
  const json document = run_json(tiny_plan({"--tensor-parallel", "2"}));
  const json& predicted = document.at("predicted");
  REQUIRE(document.at("plan").at("tensor_parallel_degree") == 2);
  REQUIRE_FALSE(document.at("baselines").empty());
  for (const json& baseline : document.at("baselines")) {
    CAPTURE(baseline.dump());
    CHECK(baseline.at("tokens_per_step") == 4 * 64);
    CHECK(predicted.at("tokens_per_step") == baseline.at("tokens_per_step"));
    CHECK(baseline.at("planned_speedup").get<double>() ==
          doctest::Approx(predicted.at("tokens_per_s").get<double>() / baseline.at("tokens_per_s").get<double>()));
  }
  const RunResult text = run_shardplan({"plan", "-m", "tiny-llama", "-c", "4xcpu", "--seq-len", "64",
                                        "--tensor-parallel", "2"});
  REQUIRE(text.exit_status == 0);
  CHECK(contains(text.out, "global batch 4 sequences (256 tokens) per step: micro-batch"));
  CHECK(contains(text.out, "x 2 data-parallel ranks"));
  CHECK(contains(text.out, "transformer_auto_wrap_policy"));
  CHECK(contains(text.out, "4 sequences (256 tokens)"));
}
