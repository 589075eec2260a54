// Fuzz-like tests of the plan, profile and trace readers (the model, cluster and catalog readers are in
// test_fuzz_inputs.cpp): deterministic text and value mutations are accepted or rejected with InputError only.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "chrome_trace.h"
#include "cluster.h"
#include "errors.h"
#include "fuzz_mutations.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "json_input.h"
#include "lowering.h"
#include "model_presets.h"
#include "plan.h"
#include "plan_json.h"
#include "simulator.h"

namespace {

using nlohmann::json;
using shardplan::InputError;

// Fixed seed: every run feeds the same inputs, so a failure reproduces.
constexpr std::uint32_t kSeed = 0x5eed0020;

struct Outcome {
  int attempts = 0, accepted = 0, rejected = 0, failures = 0;
  std::string first_failure;
};

// Runs `read` on every input; anything but success or InputError is a failure (the first one is kept, shortened).
void attempt(Outcome& outcome, const std::string& input, const std::function<void()>& read) {
  ++outcome.attempts;
  try {
    read();
    ++outcome.accepted;
  } catch (const InputError&) {
    ++outcome.rejected;
  } catch (const std::exception& error) {
    if (outcome.failures++ == 0) outcome.first_failure = std::string(error.what()) + " <- " + input.substr(0, 300);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

// A reader: the document as the CLI reads it (parse, then the format's reader and its checks).
using Reader = std::function<void(const json&, const std::string&)>;

Outcome fuzz(const std::string& text, const Reader& read, std::size_t value_stride) {
  Outcome outcome;
  std::mt19937 rng(kSeed);
  for (const std::string& mutated : fuzz_mutations::text_mutations(text, rng)) {
    attempt(outcome, mutated, [&] { read(shardplan::parse_json_text(mutated, "fuzz.json"), "fuzz.json"); });
  }
  // The structural mutations of every value_stride-th value, one copy at a time (a trace has thousands of values,
  // and fuzz_mutations::value_mutations would hold every mutated copy at once).
  const json document = json::parse(text);
  std::vector<json::json_pointer> pointers;
  fuzz_mutations::collect_pointers(document, json::json_pointer(), pointers);
  for (std::size_t i = 0; i < pointers.size(); i += value_stride) {
    for (const json& value : fuzz_mutations::replacement_values(fuzz_mutations::is_layer_count(pointers[i]))) {
      json mutated = document;
      mutated[pointers[i]] = value;
      attempt(outcome, mutated.dump(), [&] { read(mutated, "fuzz.json"); });
    }
    json removed = document;
    json& parent = removed[pointers[i].parent_pointer()];
    if (parent.is_object()) parent.erase(pointers[i].back());
    if (parent.is_array()) parent.erase(static_cast<std::size_t>(std::stoul(pointers[i].back())));
    attempt(outcome, removed.dump(), [&] { read(removed, "fuzz.json"); });
  }
  return outcome;
}

void check(const Outcome& outcome, const std::string& format) {
  CAPTURE(format);
  CAPTURE(outcome.first_failure);
  MESSAGE(format << ": " << outcome.attempts << " inputs, " << outcome.accepted << " accepted, " << outcome.rejected
                 << " rejected");
  CHECK(outcome.failures == 0);
  CHECK(outcome.attempts > 500);
  CHECK(outcome.rejected > outcome.attempts / 2);  // most mutations break something the reader checks
  CHECK(outcome.accepted > 0);                      // and some (a free-text field, a space) break nothing
}

}  // namespace

TEST_CASE("fuzz: mutated plans are read and validated, or rejected with InputError only") {
  const shardplan::ModelSpec model = shardplan::preset_model("tiny-llama");
  // Reading, validation for a world of 2 and of 4, and lowering: what `simulate --plan` does before simulating.
  const Reader read = [&](const json& document, const std::string& origin) {
    const shardplan::Plan plan = shardplan::plan_from_json(document, origin, model);
    for (int world : {2, 4}) (void)shardplan::lower_plan(plan, model, {world, world, 0});
  };
  for (const char* file : {"examples/plans/tiny-llama-per-block.json", "examples/plans/tiny-llama-hybrid-2x2.json"}) {
    check(fuzz(read_file(file), read, 1), file);
  }
}

TEST_CASE("fuzz: mutated hardware profiles are applied or rejected with InputError only") {
  const shardplan::Cluster cluster = shardplan::parse_cluster("2xcpu", shardplan::HardwareCatalog::builtin());
  const shardplan::HardwareProfile base = shardplan::profile_from_cluster(cluster);
  json document = shardplan::to_json(base);
  // What calibrate writes besides the parameters: fits per collective, read typed (a string here was exit 1).
  document["fits"] = {{"collectives", json::array({{{"collective", "all_gather"}, {"ranks", 2}, {"spans_nodes", false},
                                                    {"latency_s", 2e-5}, {"bus_bytes_per_s", 3e9}, {"samples", 5}}})}};
  const Reader read = [&](const json& mutated, const std::string& origin) {
    (void)shardplan::apply_profile_json(base, mutated, origin);
  };
  check(fuzz(document.dump(2), read, 1), "profile");
}

TEST_CASE("fuzz: mutated Chrome traces are read or rejected with InputError only") {
  // A predicted trace of a small plan, as `simulate --trace` writes it (strict: it carries the "shardplan" key).
  const shardplan::ModelSpec model = shardplan::preset_model("tiny-llama");
  shardplan::TrainingConfig training;
  training.seq_len = 64;
  training.precision = shardplan::precision_recipe("fp32");
  const shardplan::Plan plan = shardplan::default_plan(model, training, shardplan::parse_strategy("full_shard"),
                                                       shardplan::parse_units_policy("whole", model), 2);
  const shardplan::Cluster cluster = shardplan::parse_cluster("2xcpu", shardplan::HardwareCatalog::builtin());
  const shardplan::StepSchedule schedule = shardplan::lower_plan(plan, model, {2, 2, 0});
  const auto simulation = shardplan::simulate(schedule, shardplan::profile_from_cluster(cluster), true);
  const std::string text = shardplan::to_chrome_trace(simulation.timeline).dump(1);
  const Reader read = [&](const json& mutated, const std::string& origin) {
    (void)shardplan::from_chrome_trace(mutated, origin);
  };
  check(fuzz(text, read, 7), "trace");
}
