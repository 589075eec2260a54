// Properties of the plan search over memory caps: a looser cap never gives a slower plan, the same inputs always give
// the same plan, and the compute floor the search prunes with is below every plan of its setting (issue 31, item 6).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "llama_blocks.h"
#include "cluster.h"
#include "decoder_builder.h"
#include "model_presets.h"
#include "plan_json.h"
#include "search.h"
#include "step_analysis.h"
#include "unit_layout.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

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

// The search's JSON on `threads` threads, less its wall time (the one field that may differ between runs).
nlohmann::json search_json(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                           const TrainingConfig& training, SearchOptions options, std::size_t threads) {
  options.threads = threads;
  nlohmann::json document = to_json(search_plans(model, cluster, profile, training, options), model);
  document["search"].erase("seconds");
  return document;
}

// Whether a search claims its plan is the optimum: every setting proven, none of them over partitions only.
bool proven(const SearchResult& result) {
  return result.heuristic_settings.empty() && result.kept_by_refinement_settings == 0;
}

// Over increasing caps: once a plan fits, every looser cap has one; where both searches are proven (`proven`), the
// looser cap's plan is at least as fast; the same cap searched twice gives the same plan. Returns the number of cap
// pairs where a looser cap gave a slower plan and one of the two answers was heuristic, as the output says (holes the
// heuristic settings leave, issue 31 item 6).
std::size_t check_monotone(const MonotoneCase& c) {
  std::size_t heuristic_slower = 0;
  bool feasible = false, tighter_proven = false;
  double step_s = 0;
  std::string plan_text;
  for (const double cap_gib : c.caps_gib) {
    const SearchResult result = search_at(c, cap_gib);
    INFO(c.name << " on " << c.cluster << " at cap " << cap_gib << " GiB: " << result.best.knobs << ", "
                << result.best.summary.step_time_s << " s (tighter cap: " << step_s << " s)");
    if (feasible) {
      REQUIRE(result.feasible);
      if (tighter_proven && proven(result)) {
        CHECK(result.best.summary.step_time_s <= step_s);
      } else if (result.best.summary.step_time_s > step_s) {
        ++heuristic_slower;
        MESSAGE("heuristic answer slower under a looser cap: " << c.name << " on " << c.cluster << " at " << cap_gib
                << " GiB: " << result.best.summary.step_time_s << " s vs " << step_s << " s");
      }
    }
    if (result.feasible) {
      feasible = true;
      tighter_proven = proven(result);
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
  return heuristic_slower;
}

}  // namespace

TEST_CASE("search monotone: a looser memory cap never gives a slower plan; the same inputs the same plan") {
  // Small and fast: a 6-block Llama on one node, caps from where little fits to the device's memory.
  const MonotoneCase c{"llama2-7b 6 blocks", llama_blocks(6), "8xA100-40GB", 2048, 0,
                       {3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.5, 10.0, 40.0}};
  check_monotone(c);
}

// Note [Tightened floor]: llama2-7b at 40 GiB, AC none's wrap search gives up (its best-first tree outgrows its
// budget after the simulator refuses the label DP's wrapping) where at 38 GiB it finishes; the looser cap answered
// 0.9750 s against 0.9747 s before the search ran again under tightened floors.
TEST_CASE("search: a wrap search that gives up answers no slower than a tighter cap's exact one") {
  const MonotoneCase c{"llama2-7b", preset_model("llama2-7b"), "8xA100-40GB", 4096, 0, {}};
  const SearchResult tighter = search_at(c, 38.0), looser = search_at(c, 40.0);
  REQUIRE(tighter.feasible);
  REQUIRE(looser.feasible);
  REQUIRE(looser.fallback_settings > 0);  // the case this is about: a search that gave up
  INFO("38 GiB: " << tighter.best.knobs << ", " << tighter.best.summary.step_time_s << " s; 40 GiB: "
                  << looser.best.knobs << ", " << looser.best.summary.step_time_s << " s");
  CHECK(looser.best.summary.step_time_s <= tighter.best.summary.step_time_s);
}

TEST_CASE("search: the output names the settings whose answers are heuristic or proven over partitions only") {
  // llama2-7b on 8xA100-40GB at 40 GiB: some settings' searches give up or drop the kept-gathered choice.
  const MonotoneCase c{"llama2-7b", preset_model("llama2-7b"), "8xA100-40GB", 4096, 0, {}};
  const SearchResult result = search_at(c, 40.0);
  REQUIRE(result.feasible);
  CHECK(result.heuristic_settings.size() == result.fallback_settings);
  CHECK(result.partitions_only_settings.size() == result.kept_by_refinement_settings);
  REQUIRE_FALSE(proven(result));
  const std::string text = render_search_proof(result);
  // What "heuristic" means is said on the first line, not after whichever list comes first.
  if (!result.heuristic_settings.empty()) {
    CHECK(text.substr(0, text.find('\n')).find("a faster plan may exist") != std::string::npos);
  }
  for (const std::string& label : result.heuristic_settings) CHECK(text.find("heuristic: " + label) != std::string::npos);
  for (const std::string& label : result.partitions_only_settings) {
    CHECK(text.find("partitions only (kept units by refinement): " + label) != std::string::npos);
  }
  const nlohmann::json document = to_json(result, c.model);
  CHECK(document.at("search").at("knob_settings_heuristic") == result.heuristic_settings);
  CHECK(document.at("search").at("knob_settings_partitions_only") == result.partitions_only_settings);
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
    // Per block (the most units) with one-ahead, no and two-ahead prefetch.
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

// Note [Compute floor] with a calibrated CPU profile's dispatch overhead (issue 37's fuzz: 0.049 s per op made the
// floor, which left it out, prune almost nothing): still below every plan of its setting, and most of its step (the
// floor without the overhead fails that second check).
TEST_CASE("search monotone: the compute floor counts the dispatch overhead and stays below every plan") {
  const ModelSpec model = llama_blocks(4);
  const Cluster cluster = parse_cluster("8xA100-40GB", HardwareCatalog::builtin());
  HardwareProfile profile = profile_from_cluster(cluster);
  profile.op_dispatch_overhead_s = 0.049;
  TrainingConfig training;
  training.seq_len = 256;
  training.global_batch = 2 * cluster.world_size();
  std::size_t settings = 0;
  for (const KnobSetting& knobs : knob_settings(cluster, training, false)) {
    const double floor_s = compute_floor_s(model, cluster, profile, training, knobs);
    const Plan per_block = plan_for_knobs(model, cluster, training, knobs);
    const double step_s = analyze_step(model, cluster, profile, per_block, false).simulation.summary.step_time_s;
    INFO(knobs.label() << ": floor " << floor_s << " s, per-block plan " << step_s << " s");
    for (const Plan& plan : {per_block, with_prefetch_depth(per_block, 0), with_prefetch_depth(per_block, 2),
                             plan_with_units(model, per_block, wrap_blocks(model, 4).units)}) {
      CHECK(floor_s <= analyze_step(model, cluster, profile, plan, false).simulation.summary.step_time_s);
    }
    CHECK(floor_s >= 0.8 * step_s);
    ++settings;
  }
  CHECK(settings > 10);
}

// Note [Activation floor]: the states floor plus the activation floor is at most the allocated peak of every plan of
// its setting — per block, coarser units, the last units kept gathered, every prefetch depth, every strategy,
// checkpointing, micro-batch and offload — and it is most of the activations at that peak (not vacuous). Mutation
// tried: counting the activations of the whole step (every micro-batch) instead of one fails the first check.
TEST_CASE("search monotone: the states and activation floors are below the peak of every plan of their setting") {
  const ModelSpec model = llama_blocks(4);
  const Cluster cluster = parse_cluster("8xA100-40GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 2048;
  training.global_batch = 4 * cluster.world_size();  // micro-batches 1, 2, 4 with accumulation 4, 2, 1
  std::size_t settings = 0;
  for (const bool offload : {false, true}) {
    for (const KnobSetting& knobs : knob_settings(cluster, training, offload)) {
      const SettingFloors floors = setting_floors(model, cluster, profile, training, knobs);
      Plan states_only;
      states_only.training = training;
      states_only.offload.params = knobs.offload;
      const UnitLayout layout =
          states_floor_layout(knobs.strategy, model, training, cluster.world_size(), cluster.gpus_per_node);
      std::int64_t floor_bytes = floors.activation_peak_bytes;
      for (const std::int64_t bytes : persistent_memory({layout}, states_only, profile.context_overhead_bytes)) {
        floor_bytes += bytes;
      }
      const Plan per_block = plan_for_knobs(model, cluster, training, knobs);
      std::vector<Plan> plans = {per_block, with_prefetch_depth(per_block, 0), with_prefetch_depth(per_block, 2),
                                 plan_with_units(model, per_block, wrap_blocks(model, 2).units),
                                 plan_with_units(model, per_block, wrap_blocks(model, 4).units)};
      Plan kept = per_block;
      for (auto& unit : kept.units) unit.reshard_after_forward.enabled = false;
      plans.push_back(kept);
      INFO(knobs.label() << ": floor " << floor_bytes << " B (activations " << floors.activation_peak_bytes << " B)");
      REQUIRE(floors.activation_peak_bytes > 0);
      for (const Plan& plan : plans) {
        const SimulationSummary summary = analyze_step(model, cluster, profile, plan, false).simulation.summary;
        CHECK(floor_bytes <= summary.peak_memory_bytes);
      }
      const SimulationSummary summary = analyze_step(model, cluster, profile, per_block, false).simulation.summary;
      const auto at_peak = summary.memory_at_peak[static_cast<std::size_t>(MemoryCategory::activations)];
      CHECK(floors.activation_peak_bytes >= at_peak / 2);
      ++settings;
    }
  }
  CHECK(settings > 20);
}

// The slow part (suite 'exhaustive', its own Meson test): many models, clusters and caps.
TEST_SUITE("exhaustive") {
  TEST_CASE("search monotone over many models, clusters and caps") {
    // Caps `count` apart-evenly from `low` to `high` GiB: close caps are where a heuristic answer or a cap-dependent
    // choice shows as a slower plan under the looser one.
    const auto ladder = [](double low, double high, int count) {
      std::vector<double> caps;
      for (int step = 0; step < count; ++step) caps.push_back(low + (high - low) * step / (count - 1));
      return caps;
    };
    std::vector<MonotoneCase> cases;
    cases.push_back({"gpt2", preset_model("gpt2"), "8xA100-40GB", 1024, 0, ladder(0.5, 8.0, 16)});
    cases.push_back({"llama3.2-1b", preset_model("llama3.2-1b"), "8xH100-80GB", 4096, 0, ladder(4.0, 24.0, 16)});
    cases.push_back({"llama2-7b 10 blocks", llama_blocks(10), "2x8xH100-80GB", 2048, 2, ladder(3.0, 12.0, 16)});
    cases.push_back({"llama2-7b", preset_model("llama2-7b"), "8xA100-40GB", 4096, 0, ladder(12.0, 40.0, 12)});
    cases.push_back({"llama2-13b", preset_model("llama2-13b"), "8xA100-40GB", 4096, 0, ladder(24.0, 40.0, 9)});
    cases.push_back({"llama3-70b", preset_model("llama3-70b"), "8xH100-80GB", 4096, 0, ladder(60.0, 80.0, 5)});
    std::size_t heuristic_slower = 0;
    for (const MonotoneCase& c : cases) heuristic_slower += check_monotone(c);
    MESSAGE("looser caps with a slower heuristic answer: " << heuristic_slower);
    // Without the tightened-floor searches (Note [Tightened floor]) there were 2 (llama2-7b at 17.09 GiB, offloading,
    // and at 40 GiB); with them only for giving up and not for the dropped kept-gathered choice, 1 (llama2-7b at
    // 29.82 GiB: 1.11717 s against 1.11713 s at 27.27 GiB); with both, none.
    CHECK(heuristic_slower == 0);
  }
}

// Issue 31 item 8: capacity --global-batch-tokens 4194304 ran every setting's wrap search at up to 128 micro-batches
// per rank. Note [Compute floor]: settings whose floor is above a fitting plan's step are proven without one, and a
// search of another tensor-parallel degree starts from the best plan so far (SearchOptions::known_step_s).
TEST_CASE("search: many micro-batches per rank — most settings proven by their compute floor, degrees share one incumbent") {
  const ModelSpec model = llama_blocks(6);
  const Cluster cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 2048;
  training.global_batch = 64 * cluster.world_size();  // micro-batches 1..64 per rank
  SearchOptions options;
  options.with_baselines = false;
  const SearchResult alone = search_plans(model, cluster, profile, training, options);
  REQUIRE(alone.feasible);
  const std::size_t settings = knob_settings(cluster, training, false).size();
  MESSAGE("settings " << settings << ", proven by floor " << alone.floor_settings << ", candidates "
                      << alone.candidates_evaluated);
  CHECK(alone.floor_settings * 2 >= settings);
  // Told of a plan twice as fast (another degree's, SearchOptions::known_step_s), whose step is below every
  // setting's floor here, a search proves every setting without simulating one, and reports no plan.
  SearchOptions known = options;
  known.known_step_s = 0.5 * alone.best.summary.step_time_s;
  const SearchResult again = search_plans(model, cluster, profile, training, known);
  CHECK_FALSE(again.feasible);
  CHECK(again.candidates_evaluated == 0);
  CHECK(again.floor_settings == again.exact_settings);
  CHECK(again.floor_settings >= alone.floor_settings);
  CHECK(again.heuristic_settings.empty());
}

// Note [Shared incumbent] (degree_search.h) and Note [Setting waves] (searcher.cpp): each tensor-parallel degree's knob
// settings are searched at once on several threads, the degrees stage by stage; the plan, its prediction, the
// baselines and the search's counts are the same for 1 and 4 threads (a setting pruned by whichever settings finished
// before it would make the counts depend on timing).
TEST_CASE("search: the plan is the same for 1 and 4 threads over tensor-parallel degrees") {
  const ModelSpec model = llama_blocks(6);
  const Cluster cluster = parse_cluster("2x8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 4096;
  training.global_batch = 2 * cluster.world_size();
  SearchOptions options;
  options.tensor_parallel_degrees = {1, 2, 4, 8};
  options.memory_cap_bytes = std::int64_t{5} << 30;  // a TP degree above 1 is planned (at 6 GiB, TP 1 since
                                                     // FSDP2's reduce-scatter waits, Note [Reduce-scatter waits])
  const auto run = [&](std::size_t threads) {
    return search_json(model, cluster, profile, training, options, threads);
  };
  const nlohmann::json one = run(1), four = run(4);
  REQUIRE(one.contains("plan"));
  CHECK(one.at("plan").value("tensor_parallel_degree", 1) > 1);  // the winner is merged from the pool's results
  CHECK(one == four);
  CHECK(run(4) == four);  // and the same from one run to the next
  MESSAGE("planned: " << one.at("plan").value("tensor_parallel_degree", 1) << " TP, "
                      << one.at("search").at("candidates_evaluated") << " candidates");
}

// Note [Setting waves] (planner/searcher.cpp): one degree's knob settings are searched in waves on several threads; the plan,
// its prediction and every count of the search are the same for 1, 2 and 5 threads, over several waves and all three
// passes (one-ahead, tightened floors, prefetch depths).
TEST_CASE("search: the knob settings' waves give the same plan for 1, 2 and 5 threads") {
  const ModelSpec model = llama_blocks(12);
  const Cluster cluster = parse_cluster("2x8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 4096;
  training.global_batch = 4 * cluster.world_size();
  SearchOptions options;
  options.memory_cap_bytes = std::int64_t{12} << 30;
  const auto run = [&](std::size_t threads) {
    return search_json(model, cluster, profile, training, options, threads);
  };
  const nlohmann::json one = run(1);
  REQUIRE(one.contains("plan"));
  const nlohmann::json& search = one.at("search");
  MESSAGE("search: " << search.dump());
  // More settings searched than the first wave (one) and two more (kSettingsPerWave, 4) hold: four waves at least.
  CHECK(search.at("knob_settings_exact").get<int>() - search.at("knob_settings_proven_by_compute_floor").get<int>() +
            search.at("knob_settings_fallback").get<int>() > 9);
  CHECK_FALSE(search.at("knob_settings_heuristic").empty());  // the tightened-floor pass ran
  CHECK(run(2) == one);
  CHECK(run(5) == one);
}
