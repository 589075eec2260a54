// Properties of the plan search over memory caps: a looser cap never gives a slower plan, the same inputs always give
// the same plan, and the compute floor the search prunes with is below every plan of its setting (issue 31, item 6).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cluster.h"
#include "decoder_builder.h"
#include "model_presets.h"
#include "plan_json.h"
#include "search.h"
#include "step_analysis.h"

using namespace shardplan;

namespace {

ModelSpec llama_blocks(std::int64_t blocks) {
  DecoderArchitecture arch = preset_model("llama2-7b").architecture.value();
  arch.num_layers = blocks;
  return build_decoder("llama2-7b-" + std::to_string(blocks), arch, "test");
}

struct MonotoneCase {
  std::string name;
  ModelSpec model;
  std::string cluster;
  std::int64_t seq_len = 2048;
  std::int64_t sequences_per_rank = 0;  // a fixed global batch: micro-batch and accumulation are searched
  std::vector<double> caps_gib;         // increasing
};

// The searches as `plan` runs them (refinements, joint prefetch depth), without the baselines (not searched).
SearchResult search_at(const MonotoneCase& c, double cap_gib) {
  const Cluster cluster = parse_cluster(c.cluster, HardwareCatalog::builtin());
  TrainingConfig training;
  training.seq_len = c.seq_len;
  training.global_batch = c.sequences_per_rank * cluster.world_size();
  SearchOptions options;
  options.memory_cap_bytes = static_cast<std::int64_t>(cap_gib * (1 << 30));
  options.with_baselines = false;
  return search_plans(c.model, cluster, profile_from_cluster(cluster), training, options);
}

// Over increasing caps: once a plan fits, every looser cap has one at least as fast; the same cap searched twice
// gives the same plan. Returns the number of caps where some setting's search gave up (heuristic answers).
std::size_t check_monotone(const MonotoneCase& c) {
  std::size_t heuristic_caps = 0;
  bool feasible = false;
  double step_s = 0;
  std::string plan_text;
  for (const double cap_gib : c.caps_gib) {
    const SearchResult result = search_at(c, cap_gib);
    INFO(c.name << " on " << c.cluster << " at cap " << cap_gib << " GiB: " << result.best.knobs << ", "
                << result.best.summary.step_time_s << " s (tighter cap: " << step_s << " s)");
    if (!result.heuristic_settings.empty()) ++heuristic_caps;
    if (feasible) {
      REQUIRE(result.feasible);
      CHECK(result.best.summary.step_time_s <= step_s);
    }
    if (result.feasible) {
      feasible = true;
      step_s = result.best.summary.step_time_s;
      plan_text = to_json(result.best.plan, c.model).dump();
      CHECK(result.best.summary.peak_memory_bytes <= result.memory_cap_bytes);
    }
    const SearchResult again = search_at(c, cap_gib);
    CHECK(again.feasible == result.feasible);
    if (again.feasible && result.feasible) {
      CHECK(again.best.knobs == result.best.knobs);
      CHECK(to_json(again.best.plan, c.model).dump() == plan_text);
    }
  }
  return heuristic_caps;
}

}  // namespace

TEST_CASE("search monotone: a looser memory cap never gives a slower plan; the same inputs the same plan") {
  // Small and fast: a 6-block Llama on one node, caps from where little fits to the device's memory.
  const MonotoneCase c{"llama2-7b 6 blocks", llama_blocks(6), "8xA100-40GB", 2048, 0, {3.0, 4.0, 5.0, 7.0, 10.0, 40.0}};
  check_monotone(c);
}

TEST_CASE("search monotone: the compute floor is below the simulated step of every plan of its setting") {
  const ModelSpec model = llama_blocks(4);
  const Cluster cluster = parse_cluster("8xA100-40GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 2048;
  training.global_batch = 4 * cluster.world_size();  // micro-batches 1, 2, 4 with accumulation 4, 2, 1
  std::size_t settings = 0;
  for (const KnobSetting& knobs : knob_settings(cluster, training, false)) {
    const double floor_s = compute_floor_s(model, cluster, profile, training, knobs);
    const Plan per_block = plan_for_knobs(model, cluster, training, knobs);
    // Per block (the most units) and one unit of every block (the fewest), each with no and two-ahead prefetch.
    std::vector<Plan> plans = {per_block, with_prefetch_depth(per_block, 0), with_prefetch_depth(per_block, 2)};
    const double step_s = analyze_step(model, cluster, profile, per_block, false).simulation.summary.step_time_s;
    INFO(knobs.label() << ": floor " << floor_s << " s, per-block plan " << step_s << " s");
    for (const Plan& plan : plans) {
      CHECK(floor_s <= analyze_step(model, cluster, profile, plan, false).simulation.summary.step_time_s);
    }
    // Not a vacuous bound: the compute kernels are most of a step of this compute-bound model.
    CHECK(floor_s >= 0.5 * step_s);
    ++settings;
  }
  CHECK(settings > 10);
}

// The slow part (suite 'exhaustive', its own Meson test): many models, clusters and caps.
TEST_SUITE("exhaustive") {
  TEST_CASE("search monotone over many models, clusters and caps") {
    std::vector<MonotoneCase> cases;
    cases.push_back({"gpt2", preset_model("gpt2"), "8xA100-40GB", 1024, 0, {0.5, 1.0, 2.0, 4.0, 8.0, 40.0}});
    cases.push_back({"llama3.2-1b", preset_model("llama3.2-1b"), "8xH100-80GB", 4096, 0,
                     {4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 80.0}});
    cases.push_back({"llama2-7b 10 blocks", llama_blocks(10), "2x8xH100-80GB", 2048, 2,
                     {3.0, 4.0, 5.0, 6.0, 8.0, 12.0}});
    cases.push_back({"llama2-7b", preset_model("llama2-7b"), "8xA100-40GB", 4096, 0,
                     {12.0, 16.0, 20.0, 24.0, 30.0, 40.0}});
    cases.push_back({"llama2-13b", preset_model("llama2-13b"), "8xA100-40GB", 4096, 0,
                     {24.0, 28.0, 32.0, 36.0, 40.0}});
    cases.push_back({"llama3-70b", preset_model("llama3-70b"), "8xH100-80GB", 4096, 0, {60.0, 70.0, 75.0, 80.0}});
    std::size_t heuristic = 0;
    for (const MonotoneCase& c : cases) heuristic += check_monotone(c);
    MESSAGE("caps where some setting's search gave up (heuristic): " << heuristic);
  }
}

TEST_CASE("search: the smallest micro-batch searched is knob_settings' smallest") {
  const Cluster cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  TrainingConfig training;
  training.global_batch = 2048;
  training.micro_batch = 32;
  std::int64_t smallest = training.micro_batch;
  for (const KnobSetting& knobs : knob_settings(cluster, training, false)) smallest = std::min(smallest, knobs.micro_batch);
  CHECK(smallest_searched_micro_batch(cluster, training) == smallest);
  training.global_batch = 0;  // no global batch: the micro-batch as given
  CHECK(smallest_searched_micro_batch(cluster, training) == 32);
}
