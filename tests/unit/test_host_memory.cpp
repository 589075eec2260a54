// Tests of CPU offload's host memory (Note [Host memory]): the offloaded states add up with the GPU's to the states
// without offload, per node against the catalog's and the cluster's host memory, and the search refuses what no node
// holds with a host-memory diagnosis.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cluster.h"
#include "errors.h"
#include "host_memory.h"
#include "host_optimizer.h"
#include "json_input.h"
#include "model_presets.h"
#include "op_placement.h"
#include "search.h"
#include "step_analysis.h"
#include "unit_layout.h"

using namespace shardplan;

namespace {

constexpr std::int64_t kTiB = std::int64_t{1} << 40;

const std::vector<MemoryCategory> kStates = {MemoryCategory::sharded_params, MemoryCategory::sharded_grads,
                                             MemoryCategory::optimizer_states};

long long at(const MemoryByCategory& bytes, MemoryCategory category) {
  return bytes[static_cast<std::size_t>(category)];
}

Plan offload_plan(const ModelSpec& model, const Cluster& cluster, const std::string& strategy, bool params,
                  bool optimizer) {
  TrainingConfig training;
  training.seq_len = 1024;
  Plan plan = default_plan(model, training, parse_strategy(strategy), wrap_per_block(model), cluster.world_size());
  plan.offload.params = params;
  plan.offload.optimizer = optimizer;
  return plan;
}

Cluster cluster_with_host(const std::string& text, std::int64_t host_bytes) {
  Cluster cluster = parse_cluster(text, HardwareCatalog::builtin());
  cluster.host_memory_bytes_per_node = host_bytes;
  return cluster;
}

}  // namespace

// Mutation tried: offloaded_memory without the gradients term (the `sharded_grads` add removed) — failed with
// "CHECK( at(gpu, category) + at(host, category) == at(whole, category) ) is NOT correct! values: CHECK( 0 ==
// 1684603904 )" for every setting with parameters offloaded.
TEST_CASE("host memory: the offloaded states and the GPU's add up to the states without offload, per category") {
  const ModelSpec model = preset_model("llama2-7b");
  const Cluster cluster = cluster_with_host("2x8xA100-80GB", 2 * kTiB);
  for (const std::string strategy : {"full_shard", "shard_grad_op", "hybrid_shard", "zero2", "no_shard"}) {
    for (const auto& [params, optimizer] : std::vector<std::pair<bool, bool>>{{true, false}, {false, true}, {true, true}}) {
      CAPTURE(strategy);
      CAPTURE(params);
      CAPTURE(optimizer);
      const Plan offloading = offload_plan(model, cluster, strategy, params, optimizer);
      const Plan resident = offload_plan(model, cluster, strategy, false, false);
      const auto layouts = unit_layouts(offloading, model, cluster.world_size(), cluster.gpus_per_node);
      const MemoryByCategory gpu = persistent_memory(layouts, offloading, 0);
      const MemoryByCategory whole = persistent_memory(layouts, resident, 0);
      const MemoryByCategory host = offloaded_memory(layouts, offloading);
      for (const MemoryCategory category : kStates) {
        CAPTURE(to_string(category));
        CHECK(at(gpu, category) + at(host, category) == at(whole, category));
        CHECK(at(host, category) >= 0);
      }
      const HostMemoryUse use = host_memory_use(offloading, model, cluster);
      CHECK(use.per_rank == host);
      CHECK(use.per_node_bytes == use.per_rank_bytes * 8);
      CHECK(host_memory_use(resident, model, cluster).per_node_bytes == 0);
    }
  }
}

// Mutation tried: per_node_bytes as per_rank_bytes × the world size instead of the ranks per node — on two nodes it
// failed with "CHECK( use.per_node_bytes == expected ) is NOT correct! values: CHECK( 1128859303936 == 564429651968 )"
// (and the previous case's per-node check for its 16 ranks).
TEST_CASE("host memory: llama3-70b offloaded over 8 x A100-80GB needs 16 bytes per parameter per node, padded") {
  const ModelSpec model = preset_model("llama3-70b");
  for (const int nodes : {1, 2}) {
    const Cluster cluster = cluster_with_host(std::to_string(nodes) + "x8xA100-80GB", kTiB);
    const Plan plan = offload_plan(model, cluster, "full_shard", true, false);
    // Independently of the unit layouts: each unit's flat parameter padded to the world, a rank's shard of it in
    // fp32 (4 B), its fp32 gradient (4 B) and AdamW's m and v (8 B); 8 ranks per node.
    std::int64_t expected = 0;
    for (const UnitInfo& unit : plan_units(plan, model)) {
      const std::int64_t shard = (unit.param_count + cluster.world_size() - 1) / cluster.world_size();  // ceil
      expected += shard * (4 + 4 + 8) * cluster.gpus_per_node;
    }
    const HostMemoryUse use = host_memory_use(plan, model, cluster);
    CHECK(use.per_node_bytes == expected);
    // About 1.13e12 bytes on one node, half as much per node on two.
    CHECK(static_cast<double>(use.per_node_bytes) == doctest::Approx(16.0 * model.param_count() / nodes).epsilon(1e-4));
    CHECK(use.fits() == (nodes == 2));
    // The floor the search prunes with is below every wrapping's need, and within the padding of it.
    const std::int64_t floor = host_memory_floor_per_node(plan.units.at(1).strategy, plan.offload, model,
                                                          plan.training, cluster);
    CHECK(floor <= use.per_node_bytes);
    // Each unit's padding adds at most one element to a rank's shard: 16 bytes per unit per rank.
    CHECK(use.per_node_bytes - floor <= static_cast<std::int64_t>(plan.units.size()) * 16 * cluster.gpus_per_node);
  }
}

TEST_CASE("host memory: every builtin GPU type says what a node has; a cluster file overrides it") {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  for (const GpuSpec& gpu : catalog.gpus()) {
    CAPTURE(gpu.name);
    CHECK(gpu.host_memory_bytes_per_node > 0);  // a new GPU type needs a cited value (Note [Node host memory])
  }
  CHECK(catalog.gpu("A100-40GB").host_memory_bytes_per_node == kTiB);      // DGX A100 320GB
  CHECK(catalog.gpu("A100-80GB").host_memory_bytes_per_node == 2 * kTiB);  // DGX A100 640GB
  CHECK(catalog.gpu("H100-80GB").host_memory_bytes_per_node == 2 * kTiB);  // DGX H100
  CHECK(catalog.gpu("V100-16GB").host_memory_bytes_per_node == kTiB / 2);  // DGX-1: 512 GB
  CHECK(catalog.gpu("MI250X").host_memory_bytes_per_node == kTiB / 2);     // a Frontier node (8 GCDs): 512 GB
  CHECK(catalog.gpu("GH200-96GB").host_memory_bytes_per_node == 480 * (kTiB >> 10));  // its Grace's LPDDR5X
  // GB200's node is the NVL72 rack: 36 Grace CPUs' memory for 72 GPUs, the same per GPU as a GH200.
  CHECK(catalog.gpu("GB200").host_memory_bytes_per_node == 36 * catalog.gpu("GH200-96GB").host_memory_bytes_per_node);
  CHECK(parse_cluster("8xA100-80GB", catalog).host_memory_bytes_per_node == 2 * kTiB);

  const auto cluster_json = [&](const std::string& extra) {
    return cluster_from_json(parse_json_text("{\"gpu\": \"A100-80GB\", \"nodes\": 1" + extra + "}", "c.json"),
                             "c.json", catalog);
  };
  CHECK(cluster_json(", \"host_memory_gib_per_node\": 1024").host_memory_bytes_per_node == kTiB);
  CHECK(cluster_json(", \"host_memory_bytes_per_node\": 12345").host_memory_bytes_per_node == 12345);
  CHECK(cluster_json("").host_memory_bytes_per_node == 2 * kTiB);
  CHECK_THROWS_WITH_AS(cluster_json(", \"host_memory_gib_per_node\": 1, \"host_memory_bytes_per_node\": 2"),
                       doctest::Contains("only one of"), InputError);
  CHECK_THROWS_WITH_AS(cluster_json(", \"host_memory_gib_per_node\": -1"),
                       doctest::Contains("host_memory_gib_per_node"), InputError);
  // The inline form of a cluster file (Note [Inline JSON]) says so in its messages.
  CHECK_THROWS_WITH_AS(parse_cluster("{\"gpu\": \"A100-80GB\", \"host_memory_gib_per_node\": \"lots\"}", catalog),
                       doctest::Contains("cluster (inline JSON): field 'host_memory_gib_per_node'"), InputError);
  // A catalog entry may set it too.
  HardwareCatalog edited = catalog;
  edited.merge_user_json(parse_json_text(R"({"gpus": [{"name": "A100-80GB", "host_memory_gib_per_node": 512}]})",
                                         "cat.json"),
                         "cat.json");
  CHECK(edited.gpu("A100-80GB").host_memory_bytes_per_node == kTiB / 2);
}

// Mutation tried: the search without its host checks (fits on the GPU peak alone, offload settings not pruned by the
// host floor) — failed with "CHECK_FALSE( refused.feasible ) is NOT correct! values: CHECK_FALSE( true )".
TEST_CASE("host memory: the search refuses offload plans no node holds, and says host memory is what stands in the way") {
  // A small problem with the same shape as llama3-70b on one node: a model whose states cannot fit the GPUs, so only
  // CPU offload fits, on a node whose host memory is just below (refused) or above (planned) what offload needs.
  const ModelSpec model = preset_model("llama2-13b");
  TrainingConfig training;
  training.seq_len = 1024;
  Cluster cluster = cluster_with_host("1x2xA100-40GB", 0);
  const HostMemoryUse need =
      host_memory_use(offload_plan(model, cluster, "full_shard", true, false), model, cluster);
  REQUIRE(need.per_node_bytes > 0);
  const HardwareProfile profile = profile_from_cluster(cluster);
  SearchOptions options;
  options.with_baselines = false;
  options.refine = false;

  cluster.host_memory_bytes_per_node = need.per_node_bytes - 1;
  const SearchResult refused = search_plans(model, cluster, profile, training, options);
  CHECK_FALSE(refused.feasible);
  CHECK(refused.diagnosis.host_memory_limited);
  CHECK(refused.diagnosis.dominant_term == "host_memory");
  CHECK(refused.diagnosis.host_memory.per_node_bytes == need.per_node_bytes);
  REQUIRE(refused.diagnosis.suggestions.size() >= 2);
  CHECK(refused.diagnosis.suggestions[0].find("pinned host memory per node") != std::string::npos);
  CHECK(refused.diagnosis.suggestions[1].find("host_memory_gib_per_node") != std::string::npos);

  cluster.host_memory_bytes_per_node = need.per_node_bytes;
  const SearchResult planned = search_plans(model, cluster, profile, training, options);
  REQUIRE(planned.feasible);
  CHECK(planned.best.plan.offload.params);
  CHECK(planned.host_memory.per_node_bytes <= cluster.host_memory_bytes_per_node);
  CHECK(planned.host_memory.fits());
}

// Note [CPU optimizer step] (costmodel/host_optimizer.h): CPU offload's optimizer step streams 28 bytes per parameter
// through the node's DRAM at the fraction of its peak that ZeRO-Offload's CPU-Adam reached, and every rank of a node
// steps at once. (Timed at the host link's speed per rank, as before, the step of llama3-70b's 8.8 B parameters per
// rank took 3.86 s on 8 × H100 — 0.5 TB/s of host DRAM traffic — and did not depend on how many ranks share a node.)
TEST_CASE("CPU offload: the optimizer step takes the node's parameters over the node's DRAM bandwidth") {
  CHECK(kCpuAdamBandwidthFraction == doctest::Approx(0.4256).epsilon(1e-3));  // 109 of 256 GB/s on the DGX-2 host
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  const ModelSpec model = preset_model("llama3-70b");
  struct Step {
    std::int64_t elements;
    double seconds;
  };
  const auto optimizer_step = [&](const std::string& text) {
    const Cluster cluster = parse_cluster(text, catalog);
    const HardwareProfile profile = profile_from_cluster(cluster);
    CHECK(profile.host_memory_bytes_per_s == doctest::Approx(2 * 8 * 38.4e9));  // 2 × Xeon 8480C, DDR5-4800
    const Plan plan = offload_plan(model, cluster, "full_shard", true, false);
    const StepAnalysis analysis = analyze_step(model, cluster, profile, plan, false);
    for (const Op& op : analysis.schedule.ops) {
      if (op.kind != OpKind::optimizer_step) continue;
      CHECK(op.on_host);
      return Step{op.optimizer_elements, base_duration_s(op, analysis.schedule.compute_element_bytes, profile)};
    }
    FAIL("no optimizer step");
    return Step{};
  };
  const Step one_node = optimizer_step("8xH100-80GB");     // 8 ranks share a host
  const Step two_nodes = optimizer_step("2x4xH100-80GB");  // the same shard per rank, 4 ranks per host
  CHECK(one_node.elements == two_nodes.elements);
  CHECK(one_node.elements == doctest::Approx(70.55e9 / 8).epsilon(0.01));
  // The node's 8 shards × 28 bytes at 0.4256 × 614.4 GB/s: 7.5 s; half of it where a node holds half the ranks.
  const double node_bytes = 8.0 * static_cast<double>(one_node.elements) * 28;
  CHECK(one_node.seconds == doctest::Approx(node_bytes / (kCpuAdamBandwidthFraction * 614.4e9)).epsilon(1e-9));
  CHECK(one_node.seconds > 7.0);
  CHECK(two_nodes.seconds == doctest::Approx(one_node.seconds / 2).epsilon(1e-9));
}

// A node whose host differs from the catalog's reference system: a catalog entry's host_memory_bytes_per_s_per_node
// (one socket of 8 DDR5-4800 channels here) sets the bandwidth the CPU optimizer step shares.
TEST_CASE("CPU offload: a catalog entry sets the node's host memory bandwidth") {
  HardwareCatalog catalog = HardwareCatalog::builtin();
  catalog.merge_user_json({{"schema", "shardplan.catalog/v1"},
                           {"gpus", {{{"name", "H100-80GB"}, {"host_memory_bytes_per_s_per_node", 307.2e9}}}}},
                          "test");
  const HardwareProfile profile = profile_from_cluster(parse_cluster("8xH100-80GB", catalog));
  CHECK(profile.host_memory_bytes_per_s == doctest::Approx(307.2e9));
  CHECK(host_optimizer_step_time_s(28e9, profile) == doctest::Approx(8 * 28e9 / (kCpuAdamBandwidthFraction * 307.2e9)));
  // A GPU without a reference host takes the stated default.
  CHECK(profile_from_cluster(parse_cluster("8xL40S", catalog)).host_memory_bytes_per_s == kDefaultHostMemoryBytesPerS);
}
