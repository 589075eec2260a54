// Note [Degrees a batch rules out] (planner/search_2d.cpp): `plan` with a global batch that FSDP alone cannot split
// over the GPUs plans the degrees that can — TP, or a pipeline — and says why FSDP alone has no plan; where none can,
// the batch's error is the answer (exit 2). `capacity --global-batch-tokens` prices such points at a TP degree.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_binary.h"
#include "run_json.h"

namespace {

using shardplan_test::expect_input_error;
using shardplan_test::RunResult;
using shardplan_test::run_shardplan;
using shardplan_test::run_text_and_json;

const char* const kFsdpRefusal = "--global-batch 4: expected a multiple of micro-batch × data-parallel ranks";

}  // namespace

TEST_CASE("`plan --global-batch` below the GPUs: a TP plan, no FSDP-alone baselines and why") {
  // 4 sequences on 8 GPUs: FSDP alone would need 8; TP 2 leaves 4 data-parallel ranks.
  const auto [text, document] = run_text_and_json(
      {"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--global-batch", "4", "--pipeline-parallel", "1"});
  CHECK(text.out.find("planned: TP ") != std::string::npos);
  CHECK(text.out.find("(none: FSDP alone refuses this input — " + std::string(kFsdpRefusal)) != std::string::npos);
  CHECK(document.at("feasible").get<bool>());
  CHECK(document.at("plan").at("tensor_parallel_degree").get<int>() >= 2);
  CHECK(document.at("predicted").at("tokens_per_step").get<long>() == 4 * 8192);  // the user's batch, unchanged
  CHECK(document.at("baselines").empty());
  CHECK(document.at("baselines_refused").get<std::string>().find(kFsdpRefusal) != std::string::npos);
  // Pinned to FSDP alone, the batch's error stands; with TP 1 pinned and the pipeline left out, pp 2 takes it.
  expect_input_error({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--global-batch", "4", "--tensor-parallel", "1",
                      "--pipeline-parallel", "1"},
                     {kFsdpRefusal});
  const RunResult pipelined =
      run_shardplan({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--global-batch", "4", "--tensor-parallel", "1"});
  INFO(pipelined.err);
  CHECK(pipelined.exit_status == 0);
  CHECK(pipelined.out.find("FSDP without a pipeline: no plan (" + std::string(kFsdpRefusal)) != std::string::npos);
  CHECK(pipelined.out.find("planned: pp ") != std::string::npos);
}

TEST_CASE("`plan --global-batch 1` on 16 GPUs: only a pipeline takes it (pp 2 x TP 8)") {
  const auto [text, document] =
      run_text_and_json({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--global-batch", "1"});
  CHECK(text.out.find("FSDP without a pipeline: no plan (--global-batch 1: expected a multiple") != std::string::npos);
  CHECK(text.out.find("planned: pp 2, ") != std::string::npos);
  CHECK(document.at("feasible").get<bool>());
  CHECK(document.at("fsdp_refused").get<std::string>().find("--global-batch 1") != std::string::npos);
  const nlohmann::json& plan = document.at("plan");
  CHECK(plan.at("pipeline").at("degree").get<int>() * plan.at("tensor_parallel_degree").get<int>() == 16);
  // A pinned pipeline degree plans it too: the grid's floors are one micro-batch's, whatever the batch.
  const RunResult pinned = run_shardplan({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--global-batch", "1",
                                          "--pipeline-parallel", "2"});
  INFO(pinned.err);
  CHECK(pinned.exit_status == 0);
  CHECK(pinned.out.find("planned: pp 2, ") != std::string::npos);
}

TEST_CASE("`plan --global-batch 1` where no pipeline plan fits: NO PLAN FITS, exit 3") {
  // llama3.1-405b on 16 GPUs: pp x TP 16 takes the one sequence, but no rank holds its stage.
  const RunResult text = run_shardplan({"plan", "-m", "llama3.1-405b", "-c", "2x8xH100-80GB", "--global-batch", "1"});
  INFO(text.err);
  CHECK(text.exit_status == 3);
  CHECK(text.out.find("FSDP without a pipeline: no plan (--global-batch 1: ") != std::string::npos);
  CHECK(text.out.find("NO PLAN FITS\n") != std::string::npos);
  CHECK(text.out.find("; none fits (Note [Pipeline search]") != std::string::npos);
}

TEST_CASE("`plan --global-batch 1` where no pipeline is searched either: the batch's error, exit 2") {
  // A tied model takes no pipeline (Note [Tied layers under a pipeline]), so nothing splits one sequence 16 ways.
  expect_input_error({"plan", "-m", "llama3.2-1b", "-c", "2x8xH100-80GB", "--global-batch", "1"},
                     {"--global-batch 1: expected a multiple of micro-batch × data-parallel ranks = 1 × 16 = 16"});
}

TEST_CASE("`capacity --global-batch-tokens` below the GPUs: TP points where a degree takes it, else a pipeline") {
  // 16 sequences of 8192 tokens: 8 and 16 GPUs take FSDP alone, 32-128 a TP degree; 256 none (TP stops at 8), so the
  // pipeline grid answers there, as `plan` does on those GPUs (Note [Capacity answers] in planner/capacity.cpp).
  const nlohmann::json sweep =
      shardplan_test::run_json({"capacity", "-m", "llama3-8b", "--gpus", "H100-80GB", "--min-gpus", "8", "--max-gpus",
                                "256", "--global-batch-tokens", "131072", "--json"});
  const nlohmann::json planned = shardplan_test::run_json(
      {"plan", "-m", "llama3-8b", "-c", "32x8xH100-80GB", "--global-batch", "16", "--json"});
  const nlohmann::json& points = sweep.at("points");
  REQUIRE(points.size() == 6);
  for (const nlohmann::json& point : points) {
    const int gpus = point.at("gpus").get<int>();
    INFO(gpus << " GPUs: " << point.dump());
    const std::string plan = point.at("plan").get<std::string>();
    REQUIRE(point.at("fits").get<bool>());
    if (gpus <= 16) {
      CHECK(plan.find("TP ") == std::string::npos);
      CHECK(point.at("pipeline_parallel").get<int>() == 1);
    } else if (gpus <= 128) {
      CHECK(plan.rfind("TP " + std::to_string(gpus / 16) + ",", 0) == 0);  // 16 data-parallel ranks, one sequence each
      CHECK(point.at("pipeline_parallel").get<int>() == 1);
    } else {
      const nlohmann::json& pipeline = planned.at("pipeline_search").at("planned");
      CHECK(plan == pipeline.at("knobs").get<std::string>());
      CHECK(plan.rfind("pp ", 0) == 0);
      CHECK(point.at("pipeline_parallel").get<int>() == planned.at("plan").at("pipeline").at("degree").get<int>());
      CHECK(point.at("pipeline_parallel").get<int>() > 1);
      CHECK(point.at("step_time_s").get<double>() ==
            doctest::Approx(pipeline.at("simulation").at("step_time_s").get<double>()).epsilon(1e-12));
      // one micro-batch on two or more stages: most of the step is the bubble
      CHECK(point.at("limit").get<std::string>() == "pipeline_bubble");
      CHECK(point.at("exposed_comm_s").get<double>() > 0);
      CHECK(point.at("compute_time_s").get<double>() + point.at("exposed_comm_s").get<double>() ==
            doctest::Approx(point.at("step_time_s").get<double>()));
    }
  }
}

TEST_CASE("`capacity --global-batch-tokens` where neither TP nor a pipeline splits the batch: why, each way") {
  // 16 sequences on 2048 GPUs: pp x TP reaches 8 x 8 = 64 GPUs per sequence (llama3-8b's 32 blocks, 4 per rank), 32
  // data-parallel ranks; every grid point refuses the batch too.
  const nlohmann::json wide = shardplan_test::run_json({"capacity", "-m", "llama3-8b", "--gpus", "H100-80GB",
                                                         "--min-gpus", "2048", "--max-gpus", "2048",
                                                         "--global-batch-tokens", "131072", "--json"});
  REQUIRE(wide.at("points").size() == 1);
  const nlohmann::json& point = wide.at("points").at(0);
  CHECK_FALSE(point.at("fits").get<bool>());
  CHECK(point.at("limit").get<std::string>() == "batch");
  CHECK(point.at("why_not").get<std::string>() ==
        "global batch of 16 sequences does not divide over 2048 GPUs at any TP degree or pipeline (pp x TP)");
  // A tied model takes no pipeline (Note [Tied layers under a pipeline]): TP alone is tried.
  const nlohmann::json tied = shardplan_test::run_json({"capacity", "-m", "llama3.2-1b", "--gpus", "H100-80GB",
                                                         "--min-gpus", "256", "--max-gpus", "256",
                                                         "--global-batch-tokens", "131072", "--json"});
  REQUIRE(tied.at("points").size() == 1);
  CHECK(tied.at("points").at(0).at("why_not").get<std::string>() ==
        "global batch of 16 sequences does not divide over 256 GPUs at any TP degree");
}

TEST_CASE("`capacity` at long sequences searches the context-parallel degrees `plan` does, with the same answer") {
  // llama3.1-8b at 131,072 tokens on 8 H100s: the best plan without CP checkpoints one sequence per micro-batch, so
  // cp 2, 4, 8 are searched (Note [Context-parallel search]); the sweep's point and `plan` pick the same CP plan.
  const nlohmann::json sweep =
      shardplan_test::run_json({"capacity", "-m", "llama3.1-8b", "--gpus", "H100-80GB", "--min-gpus", "8",
                                "--max-gpus", "8", "--seq-len", "131072", "--json"});
  const nlohmann::json planned =
      shardplan_test::run_json({"plan", "-m", "llama3.1-8b", "-c", "8xH100-80GB", "--seq-len", "131072", "--json"});
  REQUIRE(sweep.at("points").size() == 1);
  const nlohmann::json& point = sweep.at("points").at(0);
  INFO(point.dump());
  REQUIRE(point.at("fits").get<bool>());
  REQUIRE(planned.at("context_parallel_degree").get<int>() > 1);
  CHECK(point.at("plan").get<std::string>().rfind(
            "CP " + std::to_string(planned.at("context_parallel_degree").get<int>()) + ", ", 0) == 0);
  CHECK(point.at("plan").get<std::string>() == planned.at("knobs").get<std::string>());
  CHECK(point.at("step_time_s").get<double>() ==
        doctest::Approx(planned.at("predicted").at("step_time_s").get<double>()).epsilon(1e-12));
}
