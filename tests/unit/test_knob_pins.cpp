// Tests of Note [Pinned knobs] (planner/search.h): a knob given is fixed, one left out searched; and Note [Equal
// global batch] (planner/search_2d.cpp): every tensor-parallel degree runs the baselines' global batch.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "cluster.h"
#include "hardware_catalog.h"
#include "model_presets.h"
#include "search.h"
#include "test_support.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

std::set<std::string> strategies_of(const std::vector<KnobSetting>& settings) {
  std::set<std::string> names;
  for (const KnobSetting& knobs : settings) names.insert(to_string(knobs.strategy.kind));
  return names;
}

std::set<std::string> patterns_of(const std::vector<KnobSetting>& settings) {
  std::set<std::string> patterns;
  for (const KnobSetting& knobs : settings) patterns.insert(knobs.ac);
  return patterns;
}

std::set<std::int64_t> micro_batches_of(const std::vector<KnobSetting>& settings) {
  std::set<std::int64_t> micro_batches;
  for (const KnobSetting& knobs : settings) micro_batches.insert(knobs.micro_batch);
  return micro_batches;
}

// tiny-llama on 4 CPU ranks: a search in well under a second.
struct TinySetup {
  ModelSpec model = preset_model("tiny-llama");
  Cluster cluster = parse_cluster("4xcpu", HardwareCatalog::builtin());
  HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  TinySetup() { training.seq_len = 64; }
};

}  // namespace

// Issue 31, item 4. Mutations: knob_settings ignoring pins.strategy fails "strategies_of(...) == {shard_grad_op}";
// ignoring pins.checkpointing fails the pattern check; ignoring pins.micro_batch fails the micro-batch check.
TEST_CASE("pinned knobs: knob_settings keeps only the pinned value of each pinned knob and searches the others") {
  const Cluster cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  TrainingConfig training;
  training.seq_len = 1024;
  training.global_batch = 4 * cluster.world_size();  // 4 sequences per rank: micro-batches 1, 2, 4
  const auto searched = knob_settings(cluster, training, false);
  CHECK(strategies_of(searched).size() > 3);
  CHECK(patterns_of(searched) == std::set<std::string>{"none", "25%", "50%", "75%", "full", "selective-op"});
  CHECK(micro_batches_of(searched) == std::set<std::int64_t>{1, 2, 4});

  SUBCASE("--strategy") {
    KnobPins pins;
    pins.strategy = parse_strategy("shard_grad_op");
    const auto settings = knob_settings(cluster, training, false, pins);
    CHECK(strategies_of(settings) == std::set<std::string>{"shard_grad_op"});
    CHECK(patterns_of(settings) == patterns_of(searched));  // the others still searched
    CHECK(micro_batches_of(settings) == micro_batches_of(searched));
  }
  SUBCASE("--ac full --ac-every 2") {
    training.checkpointing = ActivationCheckpointing::full;
    training.checkpoint_every_blocks = 2;
    KnobPins pins;
    pins.checkpointing = true;
    const auto settings = knob_settings(cluster, training, false, pins);
    CHECK(patterns_of(settings) == std::set<std::string>{"full every 2"});
    for (const KnobSetting& knobs : settings) CHECK(knobs.ac_given);
    CHECK(strategies_of(settings) == strategies_of(searched));
    CHECK(micro_batches_of(settings) == micro_batches_of(searched));
  }
  SUBCASE("--micro-batch 2 with --global-batch") {
    training.micro_batch = 2;
    KnobPins pins;
    pins.micro_batch = true;
    const auto settings = knob_settings(cluster, training, false, pins);
    CHECK(micro_batches_of(settings) == std::set<std::int64_t>{2});
    CHECK(patterns_of(settings) == patterns_of(searched));
  }
  SUBCASE("--cpu-offload and --cpu-offload=false") {
    KnobPins pins;
    pins.offload = true;
    CHECK(knob_settings(cluster, training, false, pins).empty());
    CHECK(knob_settings(cluster, training, true, pins).size() == knob_settings(cluster, training, true).size());
    pins.offload = false;
    CHECK(knob_settings(cluster, training, true, pins).empty());
  }
}

// Mutations: search_options_for leaving the degrees at {1, 2, 4, 8} under a pinned --tensor-parallel fails the
// first check; dropping the offload/TP conflict fails the error check.
TEST_CASE("pinned knobs: search_options_for gives the pinned degrees, one each, and refuses contradicting pins") {
  const TinySetup setup;
  const Cluster cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  KnobPins pins;
  CHECK(search_options_for(pins, setup.model, cluster).tensor_parallel_degrees == std::vector<int>{1, 2, 4, 8});
  CHECK(search_options_for(pins, setup.model, cluster).expert_parallel_degrees == std::vector<int>{1});
  pins.tensor_parallel = 1;  // capacity --tensor-parallel 1 searched {1, 1}: degree 1 twice
  CHECK(search_options_for(pins, setup.model, cluster).tensor_parallel_degrees == std::vector<int>{1});
  pins.tensor_parallel.reset();
  pins.offload = true;  // offload with TP is unsupported: pinning it leaves FSDP alone
  const SearchOptions offloading = search_options_for(pins, setup.model, cluster);
  CHECK(offloading.tensor_parallel_degrees == std::vector<int>{1});
  CHECK(offloading.allow_offload);
  pins.tensor_parallel = 2;
  CHECK(input_error_message([&] { (void)search_options_for(pins, setup.model, cluster); }) ==
        "--cpu-offload with --tensor-parallel 2: not yet supported (expected --tensor-parallel 1, or no "
        "--cpu-offload)");
  pins.offload = false;
  CHECK_FALSE(search_options_for(pins, setup.model, cluster).allow_offload);
  KnobPins expert;
  expert.strategy = parse_strategy("no_shard");
  expert.expert_parallel = 2;
  CHECK(input_error_message([&] { (void)search_options_for(expert, setup.model, cluster); })
            .rfind("--strategy no_shard with --expert-parallel 2: expected", 0) == 0);
}

// Mutations: apply_checkpointing ignoring ac_given plans no block checkpointed for --ac full --ac-every 2
// (knob_settings ignoring pins.checkpointing is caught by the test above); KnobPins::admits admitting every baseline
// plans full_shard (a baseline) under --strategy no_shard.
TEST_CASE("pinned knobs: the planned plan keeps every pinned knob") {
  TinySetup setup;
  SUBCASE("--ac full, --ac none, --ac full --ac-every 2: every block") {
    const std::vector<std::pair<ActivationCheckpointing, std::int64_t>> pinned = {
        {ActivationCheckpointing::full, 1}, {ActivationCheckpointing::none, 1}, {ActivationCheckpointing::full, 2}};
    for (const auto& [mode, every] : pinned) {
      CAPTURE(std::string(to_string(mode)));
      CAPTURE(every);
      setup.training.checkpointing = mode;
      setup.training.checkpoint_every_blocks = every;
      KnobPins pins;
      pins.checkpointing = true;
      const SearchResult result = search_plans(setup.model, setup.cluster, setup.profile, setup.training,
                                               search_options_for(pins, setup.model, setup.cluster));
      REQUIRE(result.feasible);
      std::size_t block = 0;
      for (std::size_t layer = 0; layer < setup.model.layers.size(); ++layer) {
        if (setup.model.layers[layer].kind != LayerKind::transformer_block) continue;
        const auto expected = (block + 1) % every == 0 ? mode : ActivationCheckpointing::none;
        CHECK(result.best.plan.layer_checkpointing[layer] == expected);
        ++block;
      }
    }
  }
  SUBCASE("--strategy, baselines included") {
    for (const std::string strategy : {"shard_grad_op", "no_shard", "full_shard"}) {
      CAPTURE(strategy);
      KnobPins pins;
      pins.strategy = parse_strategy(strategy);
      const SearchResult result = search_plans(setup.model, setup.cluster, setup.profile, setup.training,
                                               search_options_for(pins, setup.model, setup.cluster));
      REQUIRE(result.feasible);
      for (const auto& unit : result.best.plan.units) CHECK(to_string(unit.strategy.kind) == strategy);
    }
  }
}

// Issue 31, item 5: a TP 2 plan on 4 ranks has 2 data-parallel ranks; it used to run 2 sequences per step against the
// baselines' 4 and print a speed-up from step times. Mutation: search_2d not defining the global batch fails the
// tokens-per-step check (128 == 256).
TEST_CASE("equal global batch: a tensor-parallel plan runs the baselines' sequences per step") {
  const TinySetup setup;
  SearchOptions options;
  options.tensor_parallel_degrees = {2};
  const SearchResult result = search_plans(setup.model, setup.cluster, setup.profile, setup.training, options);
  REQUIRE(result.feasible);
  CHECK(result.best.plan.tensor_parallel_degree == 2);
  REQUIRE_FALSE(result.baselines.empty());
  for (const BaselineResult& baseline : result.baselines) {
    CAPTURE(baseline.name);
    CHECK(baseline.candidate.summary.tokens_per_step == 4 * setup.training.seq_len);
    CHECK(result.best.summary.tokens_per_step == baseline.candidate.summary.tokens_per_step);
  }
  CHECK(result.best.plan.training.micro_batch * result.best.plan.grad_accumulation_steps == 2);  // per DP rank
}
