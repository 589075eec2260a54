// Note [Communication floor] and Note [Step floor] (planner/communication_floor.h): the step floor the plan search
// prunes knob settings with is below the simulated step of every plan of its setting, and above the compute floor
// where communication dominates.
#include <doctest/doctest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "cluster.h"
#include "decoder_builder.h"
#include "finetune_apply.h"
#include "hf_example_models.h"
#include "communication_floor.h"
#include "llama_blocks.h"
#include "search.h"
#include "searcher.h"
#include "step_analysis.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

// Every wrapping shape the search builds: per block, two and four blocks per unit, the last units kept gathered, and
// no or two-ahead prefetch.
std::vector<Plan> plans_of_setting(const ModelSpec& model, const Plan& per_block) {
  const std::size_t blocks = per_block.units.size() - 1;
  std::vector<bool> last_two_kept(blocks, false);
  std::fill(last_two_kept.end() - 2, last_two_kept.end(), true);
  return {per_block,
          with_prefetch_depth(per_block, 0),
          with_prefetch_depth(per_block, 2),
          plan_with_units(model, per_block, wrap_blocks(model, 2).units),
          plan_with_units(model, per_block, wrap_blocks(model, blocks).units),
          plan_with_units(model, per_block, wrap_per_block(model).units, last_two_kept)};
}

struct FloorCase {
  const char* cluster;
  double slowdown;
};


// Every setting's step floor against every wrapping shape of it; returns how many settings were checked and how many
// of them communication (or the host's optimizer step) dominates. Each setting twice: without a memory cap, and under
// the least peak of its shapes (Note [Regather floor]), against the shapes that fit that.
struct FloorCounts {
  std::size_t settings = 0, communication_bound = 0, fitting_under_tight_cap = 0, regather_raised = 0;
  std::size_t sum_raised = 0;  // Note [Gathers before reductions]: the union's sum above every stream's own time
};
FloorCounts check_step_floors(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                              const TrainingConfig& training, bool offload) {
  FloorCounts counts;
  const double slowdown = least_overlap_compute_slowdown(profile);
  for (const KnobSetting& knobs : knob_settings(cluster, training, offload)) {
    const SettingFloors floors = setting_floors(model, cluster, profile, training, knobs);
    const CommunicationFloor communication = communication_floor(model, cluster, profile, training, knobs);
    const double busy_s = communication_busy_floor_s(communication, floors, -1, profile);
    const double busiest_stream_s = busiest_stream_floor_s(communication, floors, -1, profile);
    const double sum_s = gathers_then_reductions_s(communication, floors);
    CHECK(busy_s >= busiest_stream_s);
    CHECK(busy_s >= sum_s);
    if (sum_s > busiest_stream_s) ++counts.sum_raised;
    const double floor_s = step_floor_s(floors, busy_s, communication.optimizer_step_s, slowdown);
    const Plan per_block = plan_for_knobs(model, cluster, training, knobs);
    std::vector<SimulationSummary> summaries;
    for (const Plan& plan : plans_of_setting(model, per_block)) {
      summaries.push_back(analyze_step(model, cluster, profile, plan, false).simulation.summary);
    }
    // The tightest cap some shape fits: what the others may keep gathered beside the states and saved activations.
    std::int64_t tight_cap_bytes = summaries.front().peak_memory_bytes;
    for (const SimulationSummary& summary : summaries) {
      tight_cap_bytes = std::min(tight_cap_bytes, summary.peak_memory_bytes);
    }
    const std::int64_t keepable_bytes = tight_cap_bytes -
                                        states_floor_bytes(model, cluster, profile, training, knobs) -
                                        floors.turnaround_activation_bytes;
    const double tight_busy_s = communication_busy_floor_s(communication, floors, keepable_bytes, profile);
    const double tight_floor_s = step_floor_s(floors, tight_busy_s, communication.optimizer_step_s, slowdown);
    CHECK(floor_s >= floors.compute_s);  // never weaker than the compute floor alone
    CHECK(tight_floor_s >= floor_s);
    if (tight_floor_s > floor_s) ++counts.regather_raised;
    double fastest_s = 1e300;
    for (const SimulationSummary& summary : summaries) {
      INFO(cluster.gpu.name << " " << knobs.label() << ": floor " << floor_s << " s (compute " << floors.compute_s
                            << ", communication busy " << busy_s << "), under the tight cap " << tight_floor_s
                            << " s; plan " << summary.step_time_s << " s at " << summary.peak_memory_bytes << " B");
      CHECK(floor_s <= summary.step_time_s);
      if (summary.peak_memory_bytes <= tight_cap_bytes) {
        ++counts.fitting_under_tight_cap;
        CHECK(tight_floor_s <= summary.step_time_s);
      }
      fastest_s = std::min(fastest_s, summary.step_time_s);
    }
    // Not vacuous: where communication (or the host's optimizer step) dominates, the floor is well above the compute
    // floor and near the plans (the backward regathers beyond the regather floor are left out).
    if (busy_s + communication.optimizer_step_s > 2 * floors.compute_s) {
      ++counts.communication_bound;
      CHECK(floor_s >= 1.5 * floors.compute_s);
      CHECK(floor_s >= 0.35 * fastest_s);
    }
    ++counts.settings;
  }
  return counts;
}

}  // namespace

TEST_CASE("communication floor: the step floor is below every plan of its setting and counts communication") {
  const ModelSpec model = llama_blocks(4);
  // Short sequences on many nodes: the collectives are most of a step, so the floor must count them to be tight.
  // The slowdowns: the catalog's, and a calibrated profile's larger one (Note [Step floor]'s stretch term).
  for (const FloorCase c : {FloorCase{"4x8xA100-40GB", 0.0}, FloorCase{"4x8xA100-40GB", 1.8},
                            FloorCase{"2x8xH100-80GB", 0.0}}) {
    const Cluster cluster = parse_cluster(c.cluster, HardwareCatalog::builtin());
    HardwareProfile profile = profile_from_cluster(cluster);
    if (c.slowdown > 0) profile.overlap_compute_slowdown = c.slowdown;
    TrainingConfig training;
    training.seq_len = 256;
    FloorCounts counts;
    // Micro-batches 1 and 2 (2 and 1 a step); micro-batches 1, 2 and 4 (4, 2 and 1 a step) with and without
    // --no-sync, offloaded or not (Note [Communication floor]: gathers per micro-batch, reductions per synchronising).
    for (const auto& [sequences_per_rank, no_sync, offload] :
         {std::tuple{2, false, false}, std::tuple{2, false, true}, std::tuple{4, false, false},
          std::tuple{4, true, false}, std::tuple{4, false, true}}) {
      training.global_batch = sequences_per_rank * cluster.world_size();
      training.no_sync_accumulation = no_sync;
      const FloorCounts some = check_step_floors(model, cluster, profile, training, offload);
      counts.settings += some.settings;
      counts.communication_bound += some.communication_bound;
      counts.fitting_under_tight_cap += some.fitting_under_tight_cap;
      counts.regather_raised += some.regather_raised;
      counts.sum_raised += some.sum_raised;
    }
    CHECK(counts.settings > 10);
    CHECK(counts.communication_bound > 0);
    CHECK(counts.fitting_under_tight_cap > 0);
    CHECK(counts.sum_raised > 0);  // the regather term, subsumed here by the sum: the LoRA case below
  }
}

// Note [Communication floor]: every micro-batch gathers the model again (each backward reshards every unit), and
// every synchronising micro-batch reduces it — four micro-batches a step here, and one with --no-sync.
TEST_CASE("communication floor: gathers per micro-batch, reductions per synchronising micro-batch") {
  const ModelSpec model = llama_blocks(4);
  const Cluster cluster = parse_cluster("4x8xA100-40GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  const auto stream = [](StreamKind kind) { return static_cast<std::size_t>(kind); };
  for (const bool no_sync : {false, true}) {
    TrainingConfig training;
    training.seq_len = 256;
    training.global_batch = 4 * cluster.world_size();  // micro-batches 1, 2 and 4: 4, 2 and 1 a step
    training.no_sync_accumulation = no_sync;
    std::size_t repeated = 0;
    for (const KnobSetting& knobs : knob_settings(cluster, training, false)) {
      const CommunicationFloor communication = communication_floor(model, cluster, profile, training, knobs);
      const Plan per_block = plan_for_knobs(model, cluster, training, knobs);
      const int micro_batches = per_block.grad_accumulation_steps;
      INFO(knobs.label() << (no_sync ? " no_sync" : "") << ", " << micro_batches << " micro-batches");
      CHECK(communication.micro_batches == micro_batches);
      const double gather_s = communication.step_stream_s[stream(StreamKind::all_gather)];
      CHECK(gather_s == doctest::Approx(micro_batches * communication.first_micro_batch_gather_s));
      // Against the simulated per-block plan: its streams are busy at least the floor's terms.
      const SimulationSummary summary = analyze_step(model, cluster, profile, per_block, false).simulation.summary;
      for (const auto& [name, busy_s] : summary.stream_busy_s) {
        for (const StreamKind kind : {StreamKind::all_gather, StreamKind::reduce_scatter, StreamKind::all_reduce}) {
          if (name == to_string(kind)) CHECK(communication.step_stream_s[stream(kind)] <= busy_s * (1 + 1e-9));
        }
      }
      if (micro_batches > 1 && communication.first_micro_batch_gather_s > 0) {
        ++repeated;
        // The per-step reductions of the one synchronising micro-batch lowered, times the synchronising ones.
        KnobSetting one = knobs;
        one.micro_batch = knobs.micro_batch * micro_batches;
        const CommunicationFloor single = communication_floor(model, cluster, profile, training, one);
        REQUIRE(single.micro_batches == 1);
        const double reduce_s = communication.step_stream_s[stream(StreamKind::reduce_scatter)];
        const double one_reduce_s = single.step_stream_s[stream(StreamKind::reduce_scatter)];
        if (one_reduce_s > 0) CHECK(reduce_s == doctest::Approx((no_sync ? 1 : micro_batches) * one_reduce_s));
      }
    }
    CHECK(repeated > 5);
  }
}

// Note [Regather floor] where the reductions are small (Note [Gathers before reductions] then leaves the backward
// regather to count): LoRA reduces its adapters' gradients only, while the frozen weights are gathered whole.
TEST_CASE("communication floor: LoRA's small reductions leave the regather term to raise the floor") {
  DecoderArchitecture arch = hf_model("llama3.2-1b").architecture.value();
  arch.num_layers = 4;
  TrainingConfig training;
  training.seq_len = 256;
  training.finetune.mode = FinetuneMode::lora;
  training.finetune.lora.r = 8;
  training.finetune.lora.target_modules = {"q_proj", "v_proj"};
  const ModelSpec model = finetuned_model(build_decoder("llama3.2-1b-4-layers", arch, "test"), training.finetune,
                                          FinetuneFieldNames::cli());
  const Cluster cluster = parse_cluster("2x8xH100-80GB", HardwareCatalog::builtin());
  training.global_batch = 2 * cluster.world_size();
  const FloorCounts counts =
      check_step_floors(model, cluster, profile_from_cluster(cluster), training, false);
  CHECK(counts.settings > 5);
  CHECK(counts.regather_raised > 0);
}

// The per-micro-batch streams (Note [Communication floor]): a mixture of experts' all-to-alls, counted once per
// micro-batch from the compute floor's lowering.
TEST_CASE("communication floor: a mixture of experts' all-to-alls per micro-batch") {
  DecoderArchitecture arch = hf_model("mixtral-8x7b").architecture.value();
  arch.num_layers = 4;
  const ModelSpec model = build_decoder("mixtral-4-layers", arch, "test");
  const Cluster cluster = parse_cluster("2x8xH100-80GB", HardwareCatalog::builtin());
  const HardwareProfile profile = profile_from_cluster(cluster);
  TrainingConfig training;
  training.seq_len = 512;
  training.expert_parallel_degree = 8;
  training.global_batch = 2 * cluster.world_size();
  const KnobSetting first = knob_settings(cluster, training, false).front();
  REQUIRE(setting_floors(model, cluster, profile, training, first)
              .micro_batch_stream_s[static_cast<std::size_t>(StreamKind::all_to_all)] > 0);
  CHECK(check_step_floors(model, cluster, profile, training, false).settings > 5);
}

TEST_CASE("step floor: the stretch term by hand") {
  SettingFloors floors;
  floors.kernels_s = 10.0;
  floors.dispatch_s = 1.0;
  floors.compute_s = 11.0;
  // U = 5 s of communication, s = 2: K + D + (1 − 1/2)·(5 − 1) = 13 s.
  CHECK(step_floor_s(floors, 5.0, 0.0, 2.0) == doctest::Approx(13.0));
  // No slowdown: the compute floor; communication beyond it: the streams' own time.
  CHECK(step_floor_s(floors, 5.0, 0.0, 1.0) == doctest::Approx(11.0));
  CHECK(step_floor_s(floors, 30.0, 0.0, 2.0) == doctest::Approx(30.0));
  // Communication that fits in the dispatch overheads stretches nothing.
  CHECK(step_floor_s(floors, 0.5, 0.0, 2.0) == doctest::Approx(11.0));
  // The optimizer step adds to the compute stream and, like dispatch, hosts communication unstretched:
  // 10 + 3 + (1 − 1/2)·(5 − 3) = 14 s.
  CHECK(step_floor_s(floors, 5.0, 2.0, 2.0) == doctest::Approx(14.0));
  // A calibrated speed-up beside communication (s < 1): s·K + D.
  CHECK(step_floor_s(floors, 5.0, 0.0, 0.5) == doctest::Approx(6.0));
}

// Note [Order floor] (planner/searcher.h): the search orders its settings by the busiest stream's step floor and
// admits them by the summed one, which is never lower and raises some.
TEST_CASE("search order: settings ordered by the busiest stream's floor, admitted by the summed one") {
  const ModelSpec model = llama_blocks(4);
  const Cluster cluster = parse_cluster("4x8xA100-40GB", HardwareCatalog::builtin());
  TrainingConfig training;
  training.seq_len = 256;
  training.global_batch = 2 * cluster.world_size();
  search_internal::Searcher searcher(model, cluster, profile_from_cluster(cluster), training, SearchOptions{},
                                     std::int64_t{40} << 30);
  const search_internal::SettingOrder order = searcher.one_ahead_order(false);
  REQUIRE(order.size() > 10);
  std::size_t raised = 0;
  for (std::size_t at = 0; at < order.size(); ++at) {
    INFO(order[at].knobs.label());
    CHECK(order[at].floor_s == searcher.step_floor(order[at].knobs));
    CHECK(order[at].order_s == searcher.order_floor(order[at].knobs));
    CHECK(order[at].floor_s >= order[at].order_s);
    if (order[at].floor_s > order[at].order_s) ++raised;
    if (at > 0) CHECK(order[at - 1].order_s <= order[at].order_s);
  }
  CHECK(raised > 0);
}
