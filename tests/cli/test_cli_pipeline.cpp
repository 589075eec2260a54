// Tests of pipeline plans through the binary (Note [Pipeline policy]): `simulate --pipeline-parallel` prints every
// pipeline rank, its JSON carries the plan's pipeline, which a plan file re-simulates to the same step; the
// interleaved schedule beats 1F1B on the published 405B shape; the trace names each rank's ops by its own layers; bad
// pipeline input exits 2 with one line; PP × CP simulated and planned together, and refused by `run` in one line.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_skip.h"
#include "run_binary.h"
#include "run_json.h"

namespace {

using nlohmann::json;
using shardplan_test::expect_input_error;
using shardplan_test::RunResult;
using shardplan_test::run_json;
using shardplan_test::run_shardplan;
using shardplan_test::TempFile;

const std::vector<std::string> kTinyPipeline = {"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64",
                                                "--global-batch", "16", "--pipeline-parallel", "2"};

// A pipeline plan as `plan` prints it (with --out), as its --json says it, and its --out file re-simulated.
struct PlannedPipeline {
  RunResult text;
  json document;
  double resimulated_step_s = 0;
  double planned_step_s() const {
    return document.at("pipeline_search").at("planned").at("simulation").at("step_time_s").get<double>();
  }
};
// `plan_args`: the `plan` command; `simulate_args`: the same model, cluster and sequence for `simulate`.
PlannedPipeline plan_pipeline(const std::vector<std::string>& plan_args,
                              const std::vector<std::string>& simulate_args) {
  PlannedPipeline planned;
  TempFile plan_file("planned-pipeline");
  std::vector<std::string> with_out = plan_args;
  with_out.insert(with_out.end(), {"--out", plan_file.path()});
  planned.text = run_shardplan(with_out);
  INFO(planned.text.err);
  REQUIRE(planned.text.exit_status == 0);
  std::vector<std::string> with_json = plan_args;
  with_json.push_back("--json");
  planned.document = run_json(with_json);
  std::vector<std::string> again = simulate_args;
  again.insert(again.end(), {"--plan", plan_file.path(), "--json"});
  planned.resimulated_step_s = run_json(again).at("step_time_s").get<double>();
  return planned;
}

}  // namespace

TEST_CASE("`simulate --pipeline-parallel 2`: one line per pipeline rank; the plan's JSON re-simulates to its step") {
  const RunResult text = run_shardplan(kTinyPipeline);
  INFO(text.err);
  REQUIRE(text.exit_status == 0);
  CHECK(text.out.find("pipeline: 1F1B, 2 ranks x 1 stages each, 4 micro-batches") != std::string::npos);
  CHECK(text.out.find("pp 2") != std::string::npos);
  std::vector<std::string> json_args = kTinyPipeline;
  json_args.push_back("--json");
  const json document = run_json(json_args);
  CHECK(document.at("schema") == "shardplan.pipeline_simulation/v1");
  REQUIRE(document.at("ranks").size() == 2);
  // 1F1B: stage 0 keeps both of its warm-up micro-batches, the last stage one.
  CHECK(document.at("ranks").at(0).at("peak_in_flight_micro_batches") == 2);
  CHECK(document.at("ranks").at(1).at("peak_in_flight_micro_batches") == 1);
  const json& pipeline = document.at("plan").at("pipeline");
  CHECK(pipeline.at("degree") == 2);
  CHECK(pipeline.at("schedule") == "1F1B");
  REQUIRE(pipeline.at("stages").size() == 2);
  CHECK(pipeline.at("stages").at(0).at("first_layer") == 0);
  TempFile plan_file("pipeline-plan");
  {
    std::ofstream out(plan_file.path());
    out << document.at("plan").dump();
  }
  const json again = run_json({"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--plan", plan_file.path(), "--json"});
  CHECK(again.at("step_time_s").get<double>() ==
        doctest::Approx(document.at("step_time_s").get<double>()).epsilon(1e-12));
}

TEST_CASE("`simulate --pipeline-parallel 2 --trace`: each pipeline rank's ops are named by its own stage's layers") {
  TempFile trace("pipeline-trace");
  std::vector<std::string> args = kTinyPipeline;
  args.insert(args.end(), {"--trace", trace.path()});
  const RunResult run = run_shardplan(args);
  INFO(run.err);
  REQUIRE(run.exit_status == 0);
  std::ifstream in(trace.path());
  const json document = json::parse(in);
  // tiny-llama's layers: the embedding, 4 blocks, the norm and the head; stage 0 holds the embedding and blocks 0-1.
  std::vector<std::vector<std::string>> forwards(2);
  for (const json& event : document.at("traceEvents")) {
    if (event.value("ph", "") != "X") continue;
    const std::string name = event.at("name");
    if (name.rfind("forward ", 0) != 0 || name.find("(micro-batch 0)") == std::string::npos) continue;
    forwards.at(event.at("pid").get<std::size_t>()).push_back(name);
  }
  CHECK(forwards[0] == std::vector<std::string>{"forward model.embed_tokens (micro-batch 0)",
                                                "forward model.layers.0 (micro-batch 0)",
                                                "forward model.layers.1 (micro-batch 0)"});
  CHECK(forwards[1] == std::vector<std::string>{"forward model.layers.2 (micro-batch 0)",
                                                "forward model.layers.3 (micro-batch 0)",
                                                "forward model.norm (micro-batch 0)", "forward lm_head (micro-batch 0)"});
}

TEST_CASE("`simulate`: 405B over 16 pipeline stages with 16 micro-batches (allocator size classes)") {
  // Activations are placed in their op's layer's size class (Note [Allocator size classes]): a stage output freed by
  // another layer's op than the one that allocated it freed from the wrong class — here the first stage's embedding,
  // whose class held fewer bytes than the outputs of its 16 micro-batches (an internal error of the memory walk).
  const RunResult run = run_shardplan({"simulate", "-m", "llama3.1-405b", "-c", "256x8xH100-80GB", "--seq-len",
                                       "8192", "--global-batch", "2048", "--pipeline-parallel", "16"});
  INFO(run.err);
  CHECK(run.exit_status == 0);
  CHECK(run.out.find("pipeline: 1F1B, 16 ranks x 1 stages each, 16 micro-batches") != std::string::npos);
}

// torchtitan's Table 5 shape (benchmarks/llama3_h100_202412_torchtitan.md: 405B, FSDP 8 x TP 8 x PP 8, local batch
// 32, full AC): the interleaved schedule is published faster than 1F1B (128 vs 100 tokens/s/GPU).
TEST_CASE("`simulate`: the 405B 3-D plan with interleaved 1F1B is faster than with 1F1B, as torchtitan measured") {
  const std::vector<std::string> shape = {"simulate", "-m", "llama3.1-405b", "-c", "64x8xH100-80GB", "--seq-len",
                                          "8192", "--global-batch", "256", "--ac", "full", "--tensor-parallel", "8",
                                          "--pipeline-parallel", "8", "--json", "--pipeline-schedule"};
  std::vector<std::string> one_f_one_b = shape, interleaved = shape;
  one_f_one_b.insert(one_f_one_b.end(), {"1F1B"});
  interleaved.insert(interleaved.end(), {"Interleaved1F1B", "--stages-per-rank", "2"});
  const json plain = run_json(one_f_one_b);
  const json virtual_stages = run_json(interleaved);
  CHECK(virtual_stages.at("tokens_per_s").get<double>() > plain.at("tokens_per_s").get<double>());
  CHECK(virtual_stages.at("bubble_fraction").get<double>() < plain.at("bubble_fraction").get<double>());
}

TEST_CASE("bad pipeline input: one line naming the flag, exit 2") {
  std::vector<std::string> schedule = kTinyPipeline;
  schedule.insert(schedule.end(), {"--pipeline-schedule", "ZigZag"});
  expect_input_error(schedule, {"--pipeline-schedule"});
  expect_input_error({"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64", "--pipeline-parallel", "3"},
                     {"pp 3"});
}

// Note [Pipeline search] (planner/search_pipeline.h): `plan` searches pipeline plans beside FSDP's; a pinned degree
// plans only pipeline plans, whose --out file re-simulates to the printed step and whose torchtitan export carries
// the degree and schedule.
TEST_CASE("`plan --pipeline-parallel 2`: a pipeline plan, as printed in its file and its torchtitan export") {
  const std::vector<std::string> pinned = {"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--seq-len", "2048",
                                           "--pipeline-parallel", "2"};
  const PlannedPipeline planned =
      plan_pipeline(pinned, {"simulate", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--seq-len", "2048"});
  const std::string& text = planned.text.out;
  CHECK(text.find("planned: pp 2, ") != std::string::npos);
  CHECK(text.find("x pp 2 = 16") != std::string::npos);
  CHECK(text.find("pipeline plans: ") != std::string::npos);
  const json& document = planned.document;
  CHECK(document.at("feasible") == true);
  CHECK(document.at("plan").at("pipeline").at("degree") == 2);
  CHECK(document.at("pipeline_search").at("pinned") == true);
  CHECK(planned.resimulated_step_s == doctest::Approx(planned.planned_step_s()).epsilon(1e-12));
  const auto out_dir = shardplan_test::scratch("pipeline-export");
  std::vector<std::string> exported = pinned;
  exported.insert(exported.end(), {"--export", "torchtitan", "--out-dir", out_dir.string()});
  REQUIRE(run_shardplan(exported).exit_status == 0);
  std::ifstream toml(out_dir / "torchtitan_job.toml");
  const std::string contents((std::istreambuf_iterator<char>(toml)), std::istreambuf_iterator<char>());
  CHECK(contents.find("pipeline_parallel_degree = 2") != std::string::npos);
  CHECK(contents.find("pipeline_parallel_schedule = \"" +
                      document.at("plan").at("pipeline").at("schedule").get<std::string>() + "\"") !=
        std::string::npos);
  // Note [Balanced stage split]: a split other than torchtitan's is written by module name, one list per stage.
  const bool balanced = text.find("balanced split") != std::string::npos;
  CHECK((contents.find("module_fqns_per_model_part = [\n") != std::string::npos) == balanced);
  if (balanced) {
    std::size_t lists = 0;
    for (std::size_t at = contents.find("\n  [\""); at != std::string::npos; at = contents.find("\n  [\"", at + 1)) {
      ++lists;
    }
    CHECK(lists == document.at("plan").at("pipeline").at("stages").size());
  }
}

TEST_CASE("`plan` without --pipeline-parallel: pipeline plans searched beside FSDP's, or skipped with the reason") {
  const json searched = run_json({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--seq-len", "2048", "--json"});
  CHECK(searched.at("pipeline_search").at("searched") == true);
  CHECK(searched.at("pipeline_search").at("candidates").get<int>() > 0);
  const RunResult skipped = run_shardplan({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--seq-len", "2048",
                                           "--objective", "memory"});
  REQUIRE(skipped.exit_status == 0);
  CHECK(skipped.out.find("pipeline plans: not searched (--objective memory") != std::string::npos);
  expect_input_error({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--pipeline-parallel", "3"},
                     {"--pipeline-parallel 3"});
  expect_input_error({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--pipeline-parallel", "2", "--export",
                      "fsdp2"},
                     {"--pipeline-parallel 2", "--export fsdp2"});
  expect_input_error({"plan", "-m", "llama3-8b", "-c", "2x8xH100-80GB", "--stages-per-rank", "2"},
                     {"--stages-per-rank"});
  // Note [Tied layers under a pipeline]: a tied model's pipeline plans are left out with the reason, refused when
  // pinned, and `simulate` names the tie (it once named another layer of the last rank's model).
  const RunResult tied = run_shardplan({"plan", "-m", "llama3.2-1b", "-c", "2xRTX4090", "--seq-len", "2048"});
  REQUIRE(tied.exit_status == 0);
  CHECK(tied.out.find("pipeline plans: not searched (a model whose 'lm_head' shares its weight with "
                      "'model.embed_tokens' (tied embeddings)") != std::string::npos);
  expect_input_error({"plan", "-m", "llama3.2-1b", "-c", "2xRTX4090", "--pipeline-parallel", "2"},
                     {"--pipeline-parallel 2", "tied embeddings"});
  expect_input_error({"simulate", "-m", "llama3.2-1b", "-c", "2xRTX4090", "--pipeline-parallel", "2"},
                     {"'lm_head' shares its weight with 'model.embed_tokens'", "without --pipeline-parallel"});
  // A pinned degree whose every point is refused says why (64 stages for 32 blocks), in the text and the JSON.
  const std::vector<std::string> too_many_stages = {"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--seq-len",
                                                    "2048", "--pipeline-parallel", "8", "--pipeline-schedule",
                                                    "Interleaved1F1B", "--stages-per-rank", "8"};
  const RunResult refused = run_shardplan(too_many_stages);
  CHECK(refused.exit_status == 3);
  CHECK(refused.out.find("NO PLAN FITS with --pipeline-parallel 8") != std::string::npos);
  CHECK(refused.out.find("  refused: --pipeline-parallel: 64 stages exceed the 34 effective layers") !=
        std::string::npos);
  std::vector<std::string> as_json = too_many_stages;
  as_json.push_back("--json");
  const RunResult refused_json = run_shardplan(as_json);
  REQUIRE(refused_json.exit_status == 3);
  const json reasons = json::parse(refused_json.out).at("pipeline_search").at("refusal_reasons");
  REQUIRE(reasons.is_array());
  REQUIRE_FALSE(reasons.empty());
  CHECK(reasons.front().get<std::string>().find("64 stages exceed") != std::string::npos);
}

namespace {

// `simulate`'s JSON of the tiny pipeline, with `more` flags.
json tiny_pipeline_json(const std::vector<std::string>& more) {
  std::vector<std::string> args = kTinyPipeline;
  args.insert(args.end(), more.begin(), more.end());
  args.push_back("--json");
  return run_json(args);
}

}  // namespace

// Note [Pipeline programs] with Note [Context-parallel lowering]: `simulate` lowers PP × CP (each pipeline rank one CP
// rank's share, the ring's sends beside the pipeline's), and `plan` keeps a pinned CP degree in its pipeline search
// (Note [Fixed context parallel degree]): the planned plan's file re-simulates to its step, its torchtitan export
// carries both degrees.
TEST_CASE("`simulate` and `plan` with --pipeline-parallel 2 --context-parallel 2: lowered and searched together") {
  const json both = tiny_pipeline_json({"--context-parallel", "2"}), pipeline = tiny_pipeline_json({});
  CHECK(both.at("plan").at("context_parallel_degree") == 2);
  CHECK(both.at("plan").at("pipeline").at("degree") == 2);
  // The same sequences a step (each CP rank trains half of each), and the ring's K/V exchanges on the p2p stream.
  CHECK(both.at("tokens_per_step") == pipeline.at("tokens_per_step"));
  REQUIRE(both.at("ranks").size() == 2);
  for (std::size_t rank = 0; rank < 2; ++rank) {
    CHECK(both.at("ranks").at(rank).at("p2p_time_s").get<double>() >
          pipeline.at("ranks").at(rank).at("p2p_time_s").get<double>());
  }
  const PlannedPipeline planned =
      plan_pipeline({"plan", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64", "--global-batch", "16",
                     "--pipeline-parallel", "2", "--context-parallel", "2"},
                    {"simulate", "-m", "tiny-llama", "-c", "8xcpu"});
  const std::string& text = planned.text.out;
  CHECK(text.find(", CP 2, ") != std::string::npos);
  CHECK(text.find("dp_shard 2 x cp 2 x tp 1 x pp 2 = 8") != std::string::npos);
  CHECK(text.find("global batch 16 sequences (1024 tokens) per step") != std::string::npos);
  CHECK(planned.document.at("plan").at("context_parallel_degree") == 2);
  CHECK(planned.document.at("context_parallel_degree") == 2);
  CHECK(planned.resimulated_step_s == doctest::Approx(planned.planned_step_s()).epsilon(1e-12));
  // torchtitan defines no tiny-llama: its export of a model it trains.
  const auto out_dir = shardplan_test::scratch("pipeline-cp-export");
  const RunResult export_run = run_shardplan({"plan", "-m", "llama3.1-8b", "-c", "2x8xH100-80GB", "--seq-len",
                                              "16384", "--pipeline-parallel", "2", "--context-parallel", "2",
                                              "--export", "torchtitan", "--out-dir", out_dir.string()});
  INFO(export_run.err);
  REQUIRE(export_run.exit_status == 0);
  std::ifstream toml(out_dir / "torchtitan_job.toml");
  const std::string contents((std::istreambuf_iterator<char>(toml)), std::istreambuf_iterator<char>());
  CHECK(contents.find("pipeline_parallel_degree = 2") != std::string::npos);
  CHECK(contents.find("context_parallel_degree = 2") != std::string::npos);
  CHECK(contents.find("data_parallel_shard_degree = ") != std::string::npos);
  // A pinned pipeline without --context-parallel says nothing of CP (it searched none).
  const RunResult plain = run_shardplan({"plan", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64",
                                         "--global-batch", "16", "--pipeline-parallel", "2"});
  REQUIRE(plain.exit_status == 0);
  CHECK(plain.out.find("context parallel") == std::string::npos);
}

// Note [Pipeline search]: a context-parallel degree left out is searched in the pipeline grid too (cp 1 and those Note
// [Context-parallel search] tries), for a pinned pipeline as beside FSDP's plans; the line and the JSON say which.
TEST_CASE("`plan --pipeline-parallel 2` at 32k tokens without --context-parallel: cp searched in the pipeline grid") {
  const std::vector<std::string> args = {"plan", "-m", "llama3.1-8b", "-c", "2x8xH100-80GB", "--seq-len", "32768",
                                         "--pipeline-parallel", "2"};
  const RunResult text = run_shardplan(args);
  INFO(text.err);
  REQUIRE(text.exit_status == 0);
  CHECK(text.out.find("context parallel: cp 2, 4, 8 searched beside cp 1 in the pipeline plans' grid") !=
        std::string::npos);
  CHECK(text.out.find("(pp x schedule x TP x checkpointing x micro-batch x CP) and ") != std::string::npos);
  std::vector<std::string> with_json = args;
  with_json.push_back("--json");
  const RunResult run = run_shardplan(with_json);
  REQUIRE(run.exit_status == 0);
  const json document = json::parse(run.out);
  const json& search = document.at("context_parallel_search");
  CHECK(search.at("pipeline_searched") == json::array({2, 4, 8}));
  CHECK_FALSE(search.at("pinned").get<bool>());
  // The printed degree is the planned plan's, whichever the grid chose.
  const int planned = document.at("context_parallel_degree").get<int>();
  CHECK(document.at("plan").value("context_parallel_degree", 1) == planned);
  // Pinned, the grid keeps the given degree only.
  with_json.insert(with_json.end(), {"--context-parallel", "2"});
  const json pinned = json::parse(run_shardplan(with_json).out);
  CHECK(pinned.at("context_parallel_search").at("pipeline_searched").empty());
  CHECK(pinned.at("context_parallel_degree") == 2);
  // Where nothing fits, the line plans no degree (exit 3: no plan fits).
  const RunResult none = run_shardplan({"plan", "-m", "llama3.1-8b", "-c", "2xH100-80GB", "--seq-len", "65536",
                                        "--pipeline-parallel", "2"});
  CHECK(none.exit_status == 3);
  CHECK(none.out.find("context parallel: cp 2 searched beside cp 1 in the pipeline plans' grid "
                      "(Note [Context-parallel search]); no plan fits") != std::string::npos);
}

// The CPU runner executes PP with TP or CP inside each stage, both, and fine-tuning (tests/mpi_runner/test_pipeline.cpp
// and test_pipeline_finetune.cpp check them against the reference): `run` of the plan `simulate` writes trains on 8
// ranks, every step's line printed.
TEST_CASE("`run` executes pipeline plans with TP or CP or both in each stage and LoRA or zero-bubble on CPU ranks" *
          doctest::test_suite("can-skip")) {
  if (const std::string why = shardplan_test::mpirun_missing(); !why.empty()) SKIP_CASE(why);
  const auto run_plan = [](const std::vector<std::string>& flags) {
    TempFile plan_file("pipeline-run-plan");
    {
      std::vector<std::string> more = {"--precision", "fp32"};
      more.insert(more.end(), flags.begin(), flags.end());
      std::ofstream out(plan_file.path());
      out << tiny_pipeline_json(more).at("plan").dump();
    }
    return shardplan_test::run_program(
        "mpirun", {"--oversubscribe", "-np", "8", shardplan_test::shardplan_binary(), "run", "--device", "cpu",
                   "--plan", plan_file.path(), "--steps", "2", "--global-batch", "16"});
  };
  // The same model, init, data and global batch: the full-training meshes train to the same losses (to the printed
  // digits, ±1 in the last: the sums run in other orders).
  std::vector<double> first_losses;
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--context-parallel", "2"}, std::vector<std::string>{"--tensor-parallel", "2"},
        std::vector<std::string>{"--context-parallel", "2", "--tensor-parallel", "2"},
        std::vector<std::string>{"--finetune", "lora"},
        std::vector<std::string>{"--pipeline-schedule", "InterleavedZeroBubble"}}) {
    const RunResult run = run_plan(flags);
    INFO(flags.front() << ": stderr: " << run.err);
    CHECK(run.exit_status == 0);
    const std::size_t step0 = run.out.find("step 0: loss ");
    REQUIRE(step0 != std::string::npos);
    first_losses.push_back(std::stod(run.out.substr(step0 + std::string("step 0: loss ").size())));
    CHECK(run.out.find("step 1: loss ") != std::string::npos);
  }
  CHECK(first_losses[0] == doctest::Approx(first_losses[1]).epsilon(2e-6));
  CHECK(first_losses[0] == doctest::Approx(first_losses[2]).epsilon(2e-6));
  CHECK(first_losses[0] == doctest::Approx(first_losses[4]).epsilon(2e-6));  // the zero-bubble schedule's
}

// Note [Split backward lowering] (planner/lowering_split_backward.cpp): InterleavedZeroBubble is simulated with its
// backward split — a smaller bubble than 1F1B's at the same work without checkpointing, a slower step under full AC
// (torch recomputes a checkpointed block once per weight group in the weight part, as torchtitan measured) — and
// planned, pinned or searched; `run` trains it (the test above).
TEST_CASE("`simulate --pipeline-schedule InterleavedZeroBubble`: the split backward simulated and planned") {
  const std::vector<std::string> shape = {"simulate", "-m", "llama3-8b", "-c", "8xH100-80GB", "--seq-len", "4096",
                                          "--global-batch", "32", "--pipeline-parallel", "4", "--json", "--ac"};
  for (const char* ac : {"none", "full"}) {
    CAPTURE(ac);
    std::vector<std::string> one_f_one_b = shape, zero_bubble = shape;
    one_f_one_b.insert(one_f_one_b.end(), {ac, "--pipeline-schedule", "1F1B"});
    zero_bubble.insert(zero_bubble.end(),
                       {ac, "--pipeline-schedule", "InterleavedZeroBubble", "--stages-per-rank", "1"});
    const json plain = run_json(one_f_one_b);
    const json split = run_json(zero_bubble);
    CHECK(split.at("plan").at("pipeline").at("schedule") == "InterleavedZeroBubble");
    if (std::string(ac) == "none") {
      CHECK(split.at("bubble_fraction").get<double>() < plain.at("bubble_fraction").get<double>());
      CHECK(split.at("tokens_per_s").get<double>() > plain.at("tokens_per_s").get<double>());
    } else {
      CHECK(split.at("tokens_per_s").get<double>() < plain.at("tokens_per_s").get<double>());
    }
  }
  // Without --stages-per-rank, torchtitan's default (default_stages_per_rank): 2 for the interleaved schedules.
  for (const char* schedule : {"Interleaved1F1B", "InterleavedZeroBubble"}) {
    std::vector<std::string> defaulted = shape;
    defaulted.insert(defaulted.end(), {"none", "--pipeline-schedule", schedule});
    CHECK(run_json(defaulted).at("plan").at("pipeline").at("stages_per_rank") == 2);
  }
  const PlannedPipeline planned = plan_pipeline(
      {"plan", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64", "--global-batch", "16", "--precision", "fp32",
       "--pipeline-parallel", "2", "--pipeline-schedule", "InterleavedZeroBubble"},
      {"simulate", "-m", "tiny-llama", "-c", "8xcpu", "--seq-len", "64", "--global-batch", "16"});
  CHECK(planned.document.at("plan").at("pipeline").at("schedule") == "InterleavedZeroBubble");
  CHECK(planned.resimulated_step_s == doctest::Approx(planned.planned_step_s()).epsilon(1e-12));
  // Searched (Note [Pipeline search]) without checkpointing, with the 2 stages per rank torchtitan runs it with;
  // under full AC it loses to the others.
  const std::vector<std::string> searched = {"plan", "-m", "llama3-8b", "-c", "4x8xH100-80GB", "--seq-len", "4096",
                                             "--pipeline-parallel", "4", "--json"};
  const json free_ac = run_json(searched).at("plan");
  CHECK(free_ac.at("pipeline").at("schedule") == "InterleavedZeroBubble");
  CHECK(free_ac.at("pipeline").at("stages_per_rank") == 2);
  std::vector<std::string> full_ac = searched;
  full_ac.insert(full_ac.end(), {"--ac", "full"});
  CHECK(run_json(full_ac).at("plan").at("pipeline").at("schedule") != "InterleavedZeroBubble");
}
