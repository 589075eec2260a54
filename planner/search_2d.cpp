// search_plans over tensor-parallel degrees: each degree's FSDP search on its data-parallel view (Note [2-D plans]).
#include "search.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "degree_search.h"
#include "indexed_pool.h"
#include "memory_headroom.h"
#include "setting_floor_cache.h"
#include "step_analysis.h"
#include "tensor_parallel_view.h"

namespace shardplan {
namespace {

bool better(const PlanCandidate& candidate, const PlanCandidate& best, SearchObjective objective) {
  if (objective == SearchObjective::memory) {
    return candidate.summary.peak_memory_bytes < best.summary.peak_memory_bytes;
  }
  // Every degree runs the same global batch (Note [Equal global batch]): throughput orders them as step time does.
  return candidate.summary.tokens_per_s > best.summary.tokens_per_s;
}

// One tensor-parallel degree's data-parallel view (Note [2-D plans]) and the options its FSDP search runs with.
struct DegreeView {
  int degree = 1;
  ModelSpec model;
  Cluster cluster;
  TrainingConfig training;
  SearchOptions options;
  double seed_step_s = std::numeric_limits<double>::infinity();  // Note [Degree order]
};

DegreeView degree_view(int degree, const ModelSpec& model, const Cluster& cluster, const TrainingConfig& training,
                       const SearchOptions& options) {
  DegreeView view{degree, model, cluster, training, options};
  view.options.tensor_parallel_degrees = {1};
  if (degree == 1) return view;
  // Offload with TP is not yet supported (validate_plan); baselines are FSDP's auto-wrap policies (degree 1).
  view.options.allow_offload = false;
  view.options.with_baselines = false;
  TensorParallelSearchView sliced = tensor_parallel_search_view(degree, model, cluster);
  view.model = std::move(sliced.model);
  view.cluster = sliced.cluster;
  // Note [Equal global batch]: the user's global batch is never changed. Without --global-batch it is the
  // baselines' (FSDP alone: one micro-batch per rank, world × micro-batch sequences); this degree has world /
  // degree data-parallel ranks, so each runs degree × the sequences — as a larger micro-batch or as gradient
  // accumulation (knob_settings: searched unless --micro-batch pins it). Comparing plans at unequal batches
  // made a TP plan of half the sequences look twice as fast (issue 31, item 5).
  if (view.training.global_batch == 0) view.training.global_batch = training.micro_batch * cluster.world_size();
  return view;
}

}  // namespace

TensorParallelSearchView tensor_parallel_search_view(int degree, const ModelSpec& model, const Cluster& cluster) {
  TensorParallelSearchView view{model, cluster};
  if (degree == 1) return view;
  // Note [ParallelDims]: this degree's world, as parallel_dims(plan, world) makes it (ep 1: a model with experts
  // takes no TP degree, validate_tensor_parallel_degree).
  ParallelDegrees degrees;
  degrees.tp = degree;
  const ParallelDims dims(degrees, cluster.world_size(), "--tensor-parallel");
  view.cluster.gpus_per_node = dims.data_parallel_gpus_per_node(cluster.gpus_per_node);
  view.model = data_parallel_model(model, dims);
  return view;
}

namespace {

// Note [Degree order]: the degrees are searched stage by stage in nondecreasing seed, each stage pruned by the best
// plan of the degrees before it (Note [Shared incumbent] in degree_search.h), so the seeds decide how much is pruned,
// not the answer. A seed is cheap: per checkpointing pattern its leanest setting (smallest micro-batch, the
// enumeration's first strategy) as one unit per block, the patterns in nondecreasing compute floor (Note [Compute
// floor]), simulated until one fits (at most one simulation per pattern). The seed is only an order: every degree is
// still searched in full against the best answer before it, and among equal plans the smaller degree wins, so the
// answer is the one the enumeration order gives (where every setting's search is exact).
double seed_step_s(const DegreeView& view, const HardwareProfile& profile, std::int64_t usable_bytes) {
  // Per checkpointing pattern, its smallest micro-batch with the enumeration's first (leanest) strategy, keyed by the
  // least compute floor of any of the pattern's settings: the pattern's least activation memory, in the order its
  // fastest plans come.
  std::map<std::string, std::pair<double, KnobSetting>> by_pattern;
  std::map<std::string, double> floors;  // by the setting without its strategy: the kernels do not depend on it
  try {
    for (const KnobSetting& knobs : knob_settings(view.cluster, view.training, false, view.options.pins)) {
      KnobSetting kernels_key = knobs;
      kernels_key.strategy = ShardingStrategy{};
      const auto [floor, inserted] = floors.try_emplace(kernels_key.label(), 0.0);
      if (inserted) {
        floor->second = cached_setting_floors(view.options.floor_cache.get(), view.model, view.cluster, profile,
                                              view.training, knobs)
                            .compute_s;
      }
      const auto [entry, first] = by_pattern.try_emplace(knobs.ac, floor->second, knobs);
      if (first) continue;
      entry->second.first = std::min(entry->second.first, floor->second);
      if (knobs.micro_batch < entry->second.second.micro_batch) entry->second.second = knobs;
    }
    std::vector<std::pair<double, KnobSetting>> ordered;
    for (const auto& entry : by_pattern) ordered.push_back(entry.second);
    std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [floor_s, knobs] : ordered) {
      const Plan plan = plan_for_knobs(view.model, view.cluster, view.training, knobs);
      const SimulationSummary summary = analyze_step(view.model, view.cluster, profile, plan, false).simulation.summary;
      if (fits_in_memory(summary, usable_bytes)) return summary.step_time_s;
    }
  } catch (const InputError&) {
    // A view this search refuses (e.g. a global batch its ranks do not divide) is searched last; its search says why.
  }
  return std::numeric_limits<double>::infinity();
}

}  // namespace

SearchResult search_plans(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                          const TrainingConfig& training, const SearchOptions& options_given) {
  // Note [Shared setting floors]: the degrees' seeds and searches share one micro-batch's floors.
  SearchOptions options = options_given;
  if (!options.floor_cache) options.floor_cache = std::make_shared<SettingFloorCache>();
  std::vector<int> degrees;
  for (int degree : options.tensor_parallel_degrees) {
    if (degree == 1) {
      degrees.push_back(1);
      continue;
    }
    try {
      validate_tensor_parallel_degree(degree, model, cluster.world_size(), cluster.gpus_per_node, "--tensor-parallel");
      degrees.push_back(degree);
    } catch (const InputError&) {
      // A degree this model or node cannot take is not a candidate (the user's explicit single degree is checked by
      // the CLI before it gets here).
    }
  }
  if (degrees.empty() || degrees == std::vector<int>{1}) return search_fsdp_plans(model, cluster, profile, training, options);
  const auto started = std::chrono::steady_clock::now();
  std::vector<DegreeView> views;
  for (int degree : degrees) views.push_back(degree_view(degree, model, cluster, training, options));
  // Note [Degree order]: the degree whose first fitting plan is fastest first; ties keep the enumeration order.
  if (options.objective == SearchObjective::time) {
    const MemoryHeadroom headroom{options.memory_cap_bytes > 0 ? options.memory_cap_bytes : cluster.gpu.memory_bytes,
                                  options.memory_headroom_fraction};
    // Each degree's seed on the search's threads: they share only the floor cache, which is safe to share.
    run_indexed(views.size(), options.threads, [&](std::size_t index) {
      views[index].seed_step_s = seed_step_s(views[index], profile, headroom.usable_bytes());
    });
    std::stable_sort(views.begin(), views.end(),
                     [](const DegreeView& a, const DegreeView& b) { return a.seed_step_s < b.seed_step_s; });
  }
  // Note [Shared incumbent] (degree_search.h): the degrees' searches stage by stage in that order, each pruned by the
  // best plan of any degree so far; each degree's knob settings run on the threads (Note [Setting waves]).
  std::vector<TrainingConfig> trainings;
  for (const DegreeView& view : views) {
    trainings.push_back(view.training);
    // One expert-parallel degree at most here: a model with experts takes no TP degree above 1, so it never gets here
    // with several degrees (validate_tensor_parallel_degree).
    SHARDPLAN_CHECK(view.options.expert_parallel_degrees.size() <= 1, "several expert-parallel degrees with TP degrees");
    if (!view.options.expert_parallel_degrees.empty()) {
      trainings.back().expert_parallel_degree = view.options.expert_parallel_degrees[0];
    }
  }
  std::vector<search_internal::DegreeInput> inputs;
  for (std::size_t index = 0; index < views.size(); ++index) {
    inputs.push_back({views[index].model, views[index].cluster, trainings[index], views[index].options});
  }
  std::vector<search_internal::DegreeOutcome> outcomes = search_internal::search_degrees(inputs, profile);
  std::vector<std::optional<SearchResult>> found(views.size());
  // Note [Degrees a batch rules out]: a degree whose search refuses the input (an InputError: a global batch its
  // data-parallel ranks do not divide — 4 sequences on 8 GPUs take TP 2, not FSDP alone) is not a candidate, FSDP
  // alone (degree 1) included; its error is the answer only where no degree gives a result.
  std::exception_ptr refused;  // degree 1's refusal, else the first in search order
  for (std::size_t index = 0; index < views.size(); ++index) {
    std::exception_ptr failure = outcomes[index].failure;
    if (failure) {
      try {
        std::rethrow_exception(failure);
      } catch (const InputError&) {
        if (!refused || views[index].degree == 1) refused = failure;
        continue;
      } catch (...) {
      }
      std::rethrow_exception(failure);  // the first in search order, as a sequential search throws
    }
    found[index] = std::move(outcomes[index].result);
    if (found[index]->feasible && trainings[index].expert_parallel_degree > 1) {
      found[index]->best.knobs += ", expert parallel " + std::to_string(trainings[index].expert_parallel_degree);
    }
  }
  SearchResult result, counts;  // counts: every degree's settings (Note [Unproven bound] in search.h)
  bool have_result = false;
  int result_degree = 0;
  std::size_t evaluated = 0;
  for (std::size_t index = 0; index < views.size(); ++index) {
    if (!found[index]) continue;
    const int degree = views[index].degree;
    SearchResult& searched = *found[index];
    add_setting_counts(counts, searched, [&](const std::string& label) {
      return degree > 1 ? "TP " + std::to_string(degree) + ", " + label : label;
    });
    if (degree > 1) {
      searched.best.plan.tensor_parallel_degree = degree;
      searched.best.knobs = "TP " + std::to_string(degree) + ", " + searched.best.knobs;
    }
    evaluated += searched.candidates_evaluated;
    // Equal plans of two degrees: the smaller degree wins, whichever was searched first (Note [Degree order]).
    const bool tie_to_smaller = !better(result.best, searched.best, options.objective) && degree < result_degree;
    const bool wins = searched.feasible &&
                      (!result.feasible || better(searched.best, result.best, options.objective) || tie_to_smaller);
    if (!have_result || wins) {
      std::vector<BaselineResult> baselines = std::move(result.baselines);
      const InfeasibleDiagnosis diagnosis = result.diagnosis;
      result = std::move(searched);
      result_degree = degree;
      if (have_result) {
        if (result.baselines.empty()) result.baselines = std::move(baselines);
        if (result.diagnosis.dominant_term.empty()) result.diagnosis = diagnosis;
      }
      have_result = true;
    } else if (degree == 1) {
      result.baselines = std::move(searched.baselines);
    }
  }
  if (!have_result && refused) std::rethrow_exception(refused);
  // A single TP degree's search ran without FSDP's auto-wrap baselines (degree-1 plans): compare against them still —
  // where FSDP alone can run the batch (Note [Degrees a batch rules out]).
  if (options.with_baselines && result.baselines.empty()) {
    try {
      result.baselines = baseline_plans(model, cluster, profile, training, result.usable_memory_bytes());
    } catch (const InputError& error) {
      result.baselines_refused = error.what();
    }
  }
  result.candidates_evaluated = evaluated;
  set_setting_counts(result, counts);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace shardplan
