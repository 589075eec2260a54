// CLI tests of what a plan's memory verdict and a sweep's headline promise: the memory headroom on every "fits"
// (Note [Memory headroom]), estimate's one verdict, and capacity's impractical points (Note [Practical points]).
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

}  // namespace

// Before: llama3-8b on 8 × H100 was planned at 79.60 of 79.65 GiB allocated (99.94 %), llama2-13b on 8 × A100-40GB
// at 40.00 of 40.00 GiB, with the reserved peak not compared at all.
TEST_CASE("`plan` keeps the memory headroom free on the device peak and prints it beside fits") {
  for (const auto& [model, cluster] : std::vector<std::pair<std::string, std::string>>{
           {"llama3-8b", "8xH100-80GB"}, {"llama2-13b", "8xA100-40GB"}}) {
    CAPTURE(model);
    const json document = run_json({"plan", "-m", model, "-c", cluster, "--json"});
    REQUIRE(document.at("feasible") == true);
    CHECK(document.at("memory_headroom_fraction").get<double>() == doctest::Approx(0.03));
    const auto cap = document.at("memory_cap_bytes").get<std::int64_t>();
    const auto headroom = document.at("memory_headroom_bytes").get<std::int64_t>();
    CHECK(headroom == (cap * 3 + 99) / 100);
    CHECK(document.at("usable_memory_bytes").get<std::int64_t>() == cap - headroom);
    const json& predicted = document.at("predicted");
    CHECK(predicted.at("device_peak_bytes").get<std::int64_t>() <= cap - headroom);
    CHECK(predicted.at("device_peak_bytes").get<std::int64_t>() >=
          predicted.at("peak_memory_bytes").get<std::int64_t>());
  }
  const RunResult text = run_shardplan({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB"});
  REQUIRE(text.exit_status == 0);
  CHECK(contains(text.out, "memory cap 79.65 GiB, 3% headroom: a plan fits within 77.26 GiB"));
  CHECK(contains(text.out, "fits: device peak"));
  CHECK(contains(text.out, "3% headroom kept"));
  // --memory-headroom 0 gives the headroom back: a plan at least as fast.
  const json none = run_json({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--memory-headroom", "0", "--json"});
  const json kept = run_json({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--json"});
  CHECK(none.at("memory_headroom_bytes") == 0);
  CHECK(none.at("predicted").at("step_time_s").get<double>() <= kept.at("predicted").at("step_time_s").get<double>());
}

TEST_CASE("`--memory-headroom`: in --help of plan, capacity, estimate and simulate, with how the default was chosen") {
  for (const std::string command : {"plan", "capacity", "estimate", "simulate"}) {
    CAPTURE(command);
    const RunResult help = run_shardplan({command, "--help"});
    CHECK(help.exit_status == 0);
    CHECK(contains(help.out, "--memory-headroom"));
    CHECK(contains(help.out, "published runs"));
  }
  const RunResult bad = run_shardplan({"plan", "-m", "llama3-8b", "-c", "8xH100-80GB", "--memory-headroom", "80"});
  CHECK(bad.exit_status == 2);
  CHECK(contains(bad.err, "--memory-headroom"));
}

// Before: "total 75.18 GiB of 79.65 GiB capacity: FITS", then a caching allocator reserved figure of 74.78 GiB below
// that allocated total, and a "closed-form bound 89.03 GiB" above the capacity.
TEST_CASE("`estimate`: one verdict on the reserved peak with the headroom, reserved never below allocated, no bound") {
  const json document = run_json({"estimate", "-m", "llama3-8b", "-c", "8xH100-80GB", "--json"});
  const json& memory = document.at("memory");
  const auto capacity = memory.at("capacity_bytes").get<std::int64_t>();
  const auto headroom = memory.at("memory_headroom_bytes").get<std::int64_t>();
  const auto device = memory.at("device_peak_bytes").get<std::int64_t>();
  CHECK(headroom == (capacity * 3 + 99) / 100);
  CHECK(device >= memory.at("total_bytes").get<std::int64_t>());
  CHECK(memory.at("fits") == (device <= capacity - headroom));
  CHECK_FALSE(memory.contains("closed_form_total_bytes"));
  const RunResult text = run_shardplan({"estimate", "-m", "llama3-8b", "-c", "8xH100-80GB"});
  REQUIRE(text.exit_status == 0);
  CHECK(contains(text.out,
                 "verdict: FITS — reserved 75.78 GiB = 95.1% of 79.65 GiB; fits within 77.26 GiB (3% headroom"));
  CHECK_FALSE(contains(text.out, "closed-form"));
  CHECK(contains(text.out, "  reserved ") );
  // One verdict only: the allocated total line carries none.
  CHECK_FALSE(contains(text.out, "capacity: FITS"));
  // A headroom that the reserved peak does not leave: the one verdict says so.
  const json tight =
      run_json({"estimate", "-m", "llama3-8b", "-c", "8xH100-80GB", "--memory-headroom", "10", "--json"});
  CHECK(tight.at("memory").at("fits") == false);
}

// Before: "smallest count that fits: H100-80GB 1", a single GPU offloading the optimizer for 6,316 days.
TEST_CASE("`capacity` flags points over --max-days as impractical and headlines the smallest practical count") {
  const json document = run_json({"capacity", "-m", "llama3-8b", "--gpus", "H100-80GB", "--max-gpus", "8", "--json"});
  CHECK(document.at("max_practical_days").get<double>() == 365);
  CHECK(document.at("memory_headroom_fraction").get<double>() == doctest::Approx(0.03));
  for (const auto& point : document.at("points")) {
    CAPTURE(point.at("gpus").get<int>());
    CHECK(point.at("practical") == (point.at("fits").get<bool>() && point.at("days").get<double>() <= 365));
  }
  CHECK(document.at("points")[0].at("fits") == true);
  CHECK(document.at("points")[0].at("practical") == false);
  CHECK(document.at("smallest_fitting_gpus").at("H100-80GB") == 1);
  // 4 GPUs take 337 days with the kernel-kind overlap slowdowns and H100 clock 1 (379 before them).
  CHECK(document.at("smallest_practical_gpus").at("H100-80GB") == 4);
  const RunResult text = run_shardplan({"capacity", "-m", "llama3-8b", "--gpus", "H100-80GB", "--max-gpus", "8"});
  REQUIRE(text.exit_status == 0);
  CHECK(contains(text.out, "[IMPRACTICAL: over --max-days]"));
  CHECK(contains(text.out, "smallest practical count (fits, <= 365 days):  H100-80GB 4"));
  // A shorter threshold makes the 4-GPU point (337 days) impractical.
  const json hurried = run_json({"capacity", "-m", "llama3-8b", "--gpus", "H100-80GB", "--max-gpus", "8",
                                 "--max-days", "300", "--json"});
  CHECK(hurried.at("smallest_practical_gpus").at("H100-80GB") == 8);
}

// Before: "peak memory 75.18 GiB of 79.65 GiB (fits)" on the allocated peak, the reserved figure beside it.
TEST_CASE("`simulate` gives the same one verdict, on the reserved peak with the headroom") {
  const json document = run_json({"simulate", "-m", "llama3-8b", "-c", "8xH100-80GB", "--json"});
  const auto capacity = document.at("memory_capacity_bytes").get<std::int64_t>();
  const auto headroom = document.at("memory_headroom_bytes").get<std::int64_t>();
  CHECK(headroom == (capacity * 3 + 99) / 100);
  CHECK(document.at("fits") == (document.at("device_peak_bytes").get<std::int64_t>() <= capacity - headroom));
  const json tight =
      run_json({"simulate", "-m", "llama3-8b", "-c", "8xH100-80GB", "--memory-headroom", "10", "--json"});
  CHECK(tight.at("fits") == false);
  const RunResult text = run_shardplan({"simulate", "-m", "llama3-8b", "-c", "8xH100-80GB"});
  REQUIRE(text.exit_status == 0);
  CHECK(contains(text.out, "(caching allocator + overhead) of 79.65 GiB: fits (3% headroom, 2.39 GiB)"));
}
