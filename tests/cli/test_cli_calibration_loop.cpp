// The closed loop through the binary: calibrate on plan A's measured runs alone, then predict held-out plans — B (two
// blocks per unit, full AC) and C (shard_grad_op, one unit) at 2 ranks, D (hybrid 2×2) at 4 ranks — and compare with
// their own runs: step time (B, C) and the tracked peak (B, C within 2%; D see Note [Hybrid peak]).
//
// Note [Loop step times]: these 2-core machines are shared and their speed drifts by tens of per cent within seconds,
// so A, B and C train in the same launches with their steps interleaved (`run --plan A --plan B --plan C`, Note
// [Interleaved runs] in cli/cmd_run.cpp) and a plan's measured step is the median over 3 launches of each launch's
// median step, as benchmarks/closed_loop.py measures. Errors are factors, |log(predicted / measured)|.
//
// Note [Wrong prior]: how far the builtin catalog's CPU entry is from a machine depends on that machine's speed and
// load (its predictions were 0.23-0.45 of the measured steps in six runs here), so "closer after calibration than
// before" with the builtin prior is a coin toss on a quiet machine, and the memory peaks are within 0.02% before any
// calibration — a calibration that did nothing passed the old memory-only test. So calibration also starts from a
// prior 10× too fast (a user catalog overriding the CPU entry): its predictions are ~50× below the measured steps on
// any machine this model runs on, and a calibration that did nothing keeps them there. Asserted:
// - from either prior, the calibrated prediction of each held-out step is within a factor 3 of the measured one
//   (here ×0.97 to ×2.0 over a dozen runs, the cost model's own error on C included; a wide bound, since the
//   wrong prior, not this bound, is what a calibration that did nothing cannot pass);
// - the wrong prior is more than 4× off before calibration (so the check above can tell), and
// - the two calibrated predictions agree within 1%: calibration replaces what it fits, whatever the prior (they
//   agreed to 4 digits here). Unlike the measured step, this comparison is deterministic.
// Mutation tried: `calibrate --trace` writing its base profile instead of the fitted one (cmd_calibrate.cpp) — fails
// on B and C: from the wrong prior ×0.05 and ×0.06 after "calibration", and the two priors' predictions 5-8× apart;
// every memory check passed, and the builtin prior's factor-3 bound passed or failed with the machine's speed
// (×0.40 and ×0.43 in one run, ×0.30 in another).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_skip.h"
#include "run_binary.h"

namespace {

using nlohmann::json;
using shardplan_test::RunResult;
using shardplan_test::run_program;
using shardplan_test::run_shardplan;

constexpr int kLaunches = 3;
constexpr long long kHybridReleasedGradBytes = 451584;  // Note [Hybrid peak]
constexpr const char* kPlanA = "examples/plans/tiny-llama-per-block.json";

struct HeldOut {
  const char* plan;
  int ranks;
  bool timed;  // false: 4 ranks on 2 cores (oversubscribed), so only its memory is this plan's
};
constexpr HeldOut kHeldOut[] = {{"examples/plans/tiny-llama-2-blocks-full-ac.json", 2, true},
                                {"examples/plans/tiny-llama-shard-grad-op-whole.json", 2, true},
                                {"examples/plans/tiny-llama-hybrid-2x2.json", 4, false}};

RunResult mpirun(int ranks, std::vector<std::string> args) {
  std::vector<std::string> command = {"-np", std::to_string(ranks), "--oversubscribe",
                                      shardplan_test::shardplan_binary(), "run", "--device", "cpu"};
  command.insert(command.end(), args.begin(), args.end());
  return run_program("mpirun", command);
}

json simulate(const HeldOut& held, const std::string& profile, const std::string& catalog = "") {
  std::vector<std::string> args = {"simulate", "-m", "tiny-llama", "-c", std::to_string(held.ranks) + "xcpu",
                                   "--plan", held.plan, "--json"};
  if (!profile.empty()) args.insert(args.end(), {"--profile", profile});
  if (!catalog.empty()) args.insert(args.end(), {"--catalog", catalog});
  const RunResult result = run_shardplan(args);
  INFO(result.err);
  REQUIRE(result.exit_status == 0);
  return json::parse(result.out);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double log_error(double predicted, double measured) { return std::abs(std::log(predicted / measured)); }
double relative_error(double predicted, double measured) { return std::abs(predicted / measured - 1.0); }

}  // namespace

TEST_CASE("calibrated on plan A alone, held-out plans' step times are predicted from the data, whatever the prior"
          * doctest::test_suite("can-skip")) {
  if (const std::string why = shardplan_test::mpirun_missing(); !why.empty()) SKIP_CASE(why);
  const auto dir = std::filesystem::temp_directory_path() / ("shardplan-loop-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string profile = (dir / "profile.json").string(), wrong_profile = (dir / "from-wrong-prior.json").string();

  // Interleaved launches of A, B and C (Note [Loop step times]); A's traces are the calibration's only input.
  std::vector<double> step_times[3];  // per plan (A, B, C): each launch's median step
  long long peaks[3] = {0, 0, 0};     // per plan: the largest step's tracked peak over the launches
  std::vector<std::string> calibrate = {"calibrate"};
  for (int launch = 0; launch < kLaunches; ++launch) {
    // `run` takes a trace per plan or none; only A's is used.
    const auto trace = [&](const char* plan) { return (dir / (plan + std::to_string(launch) + ".json")).string(); };
    const std::string a_trace = trace("a");
    const RunResult run = mpirun(2, {"--steps", "8", "--json", "--plan", kPlanA, "--trace", a_trace, "--plan",
                                     kHeldOut[0].plan, "--trace", trace("b"), "--plan", kHeldOut[1].plan, "--trace",
                                     trace("c")});
    INFO(run.err);
    REQUIRE(run.exit_status == 0);
    const json runs = json::parse(run.out).at("runs");
    REQUIRE(runs.size() == 3);
    for (std::size_t plan = 0; plan < 3; ++plan) {
      step_times[plan].push_back(runs[plan].at("step_time_s").get<double>());
      peaks[plan] = std::max(peaks[plan], runs[plan].at("peak_memory_bytes").get<long long>());
    }
    calibrate.insert(calibrate.end(), {"--trace", a_trace});
  }
  const std::string wrong_prior = (dir / "fast-cpu-catalog.json").string();
  {
    // The builtin CPU entry's rates × 10 (Note [Wrong prior]).
    std::ofstream(wrong_prior) << R"({"schema": "shardplan.catalog/v1", "gpus": [{"name": "cpu", )"
                               << R"("peak_bf16_flops": 1e12, "peak_fp16_flops": 1e12, "peak_fp32_flops": 1e12, )"
                               << R"("hbm_bytes_per_s": 2e11, "intra_node_bytes_per_s": 5e10}]})";
  }
  for (const auto& [out, catalog] : {std::pair{profile, std::string()}, std::pair{wrong_profile, wrong_prior}}) {
    std::vector<std::string> args = calibrate;
    args.insert(args.end(), {"--out", out});
    if (!catalog.empty()) args.insert(args.end(), {"--catalog", catalog});
    const RunResult fit = run_shardplan(args);
    INFO(fit.err);
    REQUIRE(fit.exit_status == 0);
  }

  const RunResult d_run = mpirun(4, {"--plan", kHeldOut[2].plan, "--steps", "6", "--json"});
  INFO(d_run.err);
  REQUIRE(d_run.exit_status == 0);

  for (std::size_t i = 0; i < 3; ++i) {
    const HeldOut& held = kHeldOut[i];
    const std::string plan = held.plan;
    CAPTURE(plan);
    const json before = simulate(held, ""), after = simulate(held, profile);
    const long long peak = i < 2 ? peaks[i + 1] : json::parse(d_run.out).at("peak_memory_bytes").get<long long>();
    const auto peak_before = before.at("peak_memory_bytes").get<long long>();
    const auto peak_after = after.at("peak_memory_bytes").get<long long>();
    const auto peak_error = [&](long long predicted) {
      return relative_error(static_cast<double>(predicted), static_cast<double>(peak));
    };
    MESSAGE(plan, ": tracked peak ", peak, " B; predicted ", peak_before, " B before calibration (error ",
            100 * peak_error(peak_before), "%), ", peak_after, " B after (error ", 100 * peak_error(peak_after), "%)");
    if (!held.timed) {
      // Note [Hybrid peak]: on CPU ranks HSDP's step peak takes one of two values by timing, the predicted one or
      // 451584 B less (reduction buffers released before the peak that the schedule holds through it), and on a
      // quiet machine every step of a run can take the lower one (once in ten runs here: 11795712 B tracked against
      // 12247296 B predicted; under load one step in five). So the prediction is held to what an out-of-memory
      // error needs — not short of the tracked peak — and to 2% of the higher of the two values.
      CHECK(static_cast<double>(peak_after) >= 0.98 * static_cast<double>(peak));
      CHECK(static_cast<double>(peak_after) <= 1.02 * static_cast<double>(peak + kHybridReleasedGradBytes));
      continue;
    }
    CHECK(peak_error(peak_after) <= 0.02);

    const double measured = median(step_times[i + 1]);
    const auto step = [](const json& summary) { return summary.at("step_time_s").get<double>(); };
    const double wrong_before = step(simulate(held, "", wrong_prior));
    const double wrong_after = step(simulate(held, wrong_profile, wrong_prior));
    MESSAGE(plan, ": measured step ", measured, " s (median of ", kLaunches, " interleaved launches; A's ",
            median(step_times[0]), " s); predicted ×", step(before) / measured, " before calibration, ×",
            step(after) / measured, " after; from the wrong prior ×", wrong_before / measured, " before, ×",
            wrong_after / measured, " after");
    CHECK(log_error(step(after), measured) <= std::log(3.0));
    CHECK(log_error(wrong_before, measured) >= std::log(4.0));
    CHECK(log_error(wrong_after, measured) <= std::log(3.0));
    CHECK(log_error(wrong_after, step(after)) <= 0.01);
  }
  std::filesystem::remove_all(dir);
}
