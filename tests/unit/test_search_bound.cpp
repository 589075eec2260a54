// Note [Unproven bound] (planner/search.h): the search says how far its answer may be from the fastest plan of the
// knob settings it searched — the least step floor of the settings it did not prove — and counts every degree's
// settings, not only the winning degree's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "cluster.h"
#include "llama_blocks.h"
#include "model_presets.h"
#include "plan_json.h"
#include "search.h"
#include "searcher.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

struct BoundCase {
  ModelSpec model;
  Cluster cluster;
  TrainingConfig training;
  SearchOptions options;
};

// llama2-7b at 4096 tokens on 8 A100-40GBs under a 40 GiB cap: some settings' wrap searches give up, some prove their
// partitions only (the case of the heuristic-settings test in test_search_monotone.cpp).
BoundCase unproven_case() {
  BoundCase c{preset_model("llama2-7b"), parse_cluster("8xA100-40GB", HardwareCatalog::builtin()), {}, {}};
  c.training.seq_len = 4096;
  c.options.memory_cap_bytes = std::int64_t{40} << 30;
  c.options.with_baselines = false;
  return c;
}

// A label of the output without what it adds to the knob setting's own (" (prefetch depths)").
std::string setting_label(const std::string& label) {
  const std::string depths = " (prefetch depths)";
  return label.ends_with(depths) ? label.substr(0, label.size() - depths.size()) : label;
}

// Every setting is counted once: proven (by search or floor), heuristic, or over the memory floor.
std::size_t settings_counted(const SearchResult& result) {
  return result.exact_settings + result.fallback_settings + result.memory_floor_settings;
}

}  // namespace

// The bound the search states, checked against the settings' floors recomputed by a searcher of the same inputs.
static void check_unproven_bound(const BoundCase& c) {
  const HardwareProfile profile = profile_from_cluster(c.cluster);
  const SearchResult result = search_plans(c.model, c.cluster, profile, c.training, c.options);
  REQUIRE(result.feasible);
  std::vector<std::string> unproven = result.heuristic_settings;
  unproven.insert(unproven.end(), result.partitions_only_settings.begin(), result.partitions_only_settings.end());
  REQUIRE_FALSE(unproven.empty());  // the case this is about
  MESSAGE(unproven.size() << " settings not proven");
  // The floors recomputed by a searcher of the same inputs, by label.
  search_internal::Searcher searcher(c.model, c.cluster, profile, c.training, c.options, result.usable_memory_bytes());
  std::map<std::string, double> floor_by_label;
  for (const bool offload : {false, true}) {
    for (const KnobSetting& knobs : knob_settings(c.cluster, c.training, offload, c.options.pins)) {
      floor_by_label[knobs.label()] = searcher.step_floor(knobs);
    }
  }
  double least_s = std::numeric_limits<double>::infinity();
  for (const std::string& label : unproven) {
    INFO(label);
    REQUIRE(floor_by_label.count(setting_label(label)) == 1);
    least_s = std::min(least_s, floor_by_label.at(setting_label(label)));
  }
  INFO("answer " << result.best.knobs << ", " << result.best.summary.step_time_s << " s; bound " << least_s << " s");
  CHECK(result.unproven_floor_s == doctest::Approx(least_s).epsilon(1e-12));
  // The setting named with the bound is one of those listed, and the bound is its floor.
  CHECK(std::find(unproven.begin(), unproven.end(), result.unproven_floor_setting) != unproven.end());
  CHECK(floor_by_label[setting_label(result.unproven_floor_setting)] == doctest::Approx(least_s).epsilon(1e-12));
  // The proven settings' floors are no bound: a setting proven by search may have a floor below the unproven ones'.
  const double answer_s = result.best.summary.step_time_s;
  const std::string text = render_search_proof(result);
  CHECK(text.find("bound: no plan of the settings not proven is faster than") != std::string::npos);
  const nlohmann::json search = to_json(result, c.model).at("search");
  CHECK(search.at("unproven_step_floor_s").get<double>() == doctest::Approx(least_s).epsilon(1e-12));
  CHECK(search.at("unproven_floor_setting") == result.unproven_floor_setting);
  CHECK(text.find("(the least step floor of them, " + result.unproven_floor_setting + ")") != std::string::npos);
  CHECK(search.at("proven_within_fraction").get<double>() ==
        doctest::Approx(std::max(0.0, 1.0 - least_s / answer_s)).epsilon(1e-12));
  if (least_s < answer_s) {
    CHECK(text.find("is at most") != std::string::npos);
  } else {
    CHECK(text.find("that is the fastest of the searched knob settings") != std::string::npos);
  }
}

TEST_CASE("unproven bound: the least step floor of the settings the search did not prove, said with the answer") {
  SUBCASE("llama2-7b on 8 A100-40GBs at 40 GiB: two settings not proven") { check_unproven_bound(unproven_case()); }
  SUBCASE("llama3-70b on 256 H100s: heuristic, partitions-only and prefetch-depth settings, floors apart") {
    BoundCase c = unproven_case();
    c.model = preset_model("llama3-70b");
    c.cluster = parse_cluster("32x8xH100-80GB", HardwareCatalog::builtin());
    c.training.seq_len = 8192;
    c.options.memory_cap_bytes = 0;  // the GPU's, less the CLI's headroom
    c.options.memory_headroom_fraction = 0.03;
    check_unproven_bound(c);
  }
  SUBCASE("llama3.1-405b on 2048 H100s: the least floor is a setting's whose prefetch-depth search gave up") {
    BoundCase c = unproven_case();
    c.model = preset_model("llama3.1-405b");
    c.cluster = parse_cluster("256x8xH100-80GB", HardwareCatalog::builtin());
    c.training.seq_len = 8192;
    c.options.memory_cap_bytes = 0;
    c.options.memory_headroom_fraction = 0.03;
    check_unproven_bound(c);
  }
}

TEST_CASE("unproven bound: none where every setting is proven") {
  BoundCase c = unproven_case();
  c.model = llama_blocks(6);
  c.training.seq_len = 2048;
  const SearchResult result =
      search_plans(c.model, c.cluster, profile_from_cluster(c.cluster), c.training, c.options);
  REQUIRE(result.feasible);
  REQUIRE(result.heuristic_settings.empty());
  REQUIRE(result.partitions_only_settings.empty());
  CHECK(std::isinf(result.unproven_floor_s));
  CHECK(render_search_proof(result).find("bound:") == std::string::npos);
  const nlohmann::json search = to_json(result, c.model).at("search");
  CHECK(search.at("unproven_step_floor_s").is_null());
  CHECK(search.at("proven_within_fraction").get<double>() == 0.0);
}

TEST_CASE("search counts: every tensor-parallel degree's settings, each label with its degree") {
  BoundCase c = unproven_case();
  c.model = llama_blocks(6);
  c.training.seq_len = 2048;
  c.training.global_batch = 2 * c.cluster.world_size();
  const HardwareProfile profile = profile_from_cluster(c.cluster);
  const auto searched = [&](std::vector<int> degrees) {
    SearchOptions options = c.options;
    options.tensor_parallel_degrees = std::move(degrees);
    return search_plans(c.model, c.cluster, profile, c.training, options);
  };
  const SearchResult alone_1 = searched({1}), alone_2 = searched({2}), both = searched({1, 2});
  REQUIRE(both.feasible);
  // Each degree's settings are counted once whatever prunes them, so the joint search counts both degrees' settings.
  CHECK(settings_counted(both) == settings_counted(alone_1) + settings_counted(alone_2));
  CHECK(settings_counted(alone_1) == knob_settings(c.cluster, c.training, false).size());
}

TEST_CASE("search counts: add_setting_counts sums the counts, labels each degree's settings, keeps the least bound") {
  SearchResult total, tp2, tp4;
  tp2.exact_settings = 5;
  tp2.fallback_settings = 1;
  tp2.kept_by_refinement_settings = 1;
  tp2.floor_settings = 3;
  tp2.memory_floor_settings = 7;
  tp2.heuristic_settings = {"full_shard, AC full, micro-batch 1"};
  tp2.partitions_only_settings = {"full_shard, AC none, micro-batch 1"};
  tp2.unproven_floor_s = 2.5;
  tp2.unproven_floor_setting = "full_shard, AC full, micro-batch 1";
  tp4.exact_settings = 2;
  tp4.fallback_settings = 2;
  tp4.heuristic_settings = {"shard_grad_op, AC full, micro-batch 2", "full_shard, AC full, micro-batch 2"};
  tp4.unproven_floor_s = 2.25;
  tp4.unproven_floor_setting = "shard_grad_op, AC full, micro-batch 2";
  const auto prefix = [](int degree) {
    return [degree](const std::string& label) { return "TP " + std::to_string(degree) + ", " + label; };
  };
  add_setting_counts(total, tp2, prefix(2));
  add_setting_counts(total, tp4, prefix(4));
  CHECK(total.exact_settings == 7);
  CHECK(total.fallback_settings == 3);
  CHECK(total.kept_by_refinement_settings == 1);
  CHECK(total.floor_settings == 3);
  CHECK(total.memory_floor_settings == 7);
  CHECK(total.heuristic_settings == std::vector<std::string>{"TP 2, full_shard, AC full, micro-batch 1",
                                                              "TP 4, shard_grad_op, AC full, micro-batch 2",
                                                              "TP 4, full_shard, AC full, micro-batch 2"});
  CHECK(total.partitions_only_settings == std::vector<std::string>{"TP 2, full_shard, AC none, micro-batch 1"});
  CHECK(total.unproven_floor_s == 2.25);
  CHECK(total.unproven_floor_setting == "TP 4, shard_grad_op, AC full, micro-batch 2");
  SearchResult copied;
  copied.feasible = true;
  set_setting_counts(copied, total);
  CHECK(copied.exact_settings == 7);
  CHECK(copied.heuristic_settings == total.heuristic_settings);
  CHECK(copied.unproven_floor_s == 2.25);
  CHECK(copied.unproven_floor_setting == total.unproven_floor_setting);
  CHECK(copied.feasible);  // the counts only
}
