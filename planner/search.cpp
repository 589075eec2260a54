// The joint plan search: one degree's search (the Searcher's passes over its knob settings, then re-simulation of the
// baselines, refinements and the infeasibility diagnosis) and the search over expert-parallel degrees (knob settings:
// knob_settings.cpp; the Searcher: searcher.h; baselines: baselines.cpp).
#include "search.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <utility>

#include "errors.h"
#include "infeasible_diagnosis.h"
#include "memory_headroom.h"
#include "searcher.h"
#include "unit_layout.h"

namespace shardplan {
namespace {

using search_internal::Searcher;

// Note [Refining unproven settings]: the refinements (prefetch 0 or 2 ahead, the last units kept gathered) are tried
// on the best plan; a proven setting's search covered them already (jointly, where it finished), an unproven one's did
// not, so a heuristic setting's answer a little slower than the best can refine to below it (llama3-70b on 32x8 H100
// with --ac full: full_shard's per-cap DP answer refined to 9.4671 s while hybrid_shard:128's tightened-floor answer,
// the best before refinement, refined only to 9.4761 s). So each unproven setting's best within this fraction of the
// best plan's step is refined too; refinements gain well under 1 % there, so a 1 % window misses none seen.
constexpr double kRefinedWindow = 0.01;

// Variants of a plan that the wrap DP does not model: deeper or no prefetch, and the last `keep` units not
// resharded after forward (FSDP2's usual tweak for the units backward needs first).
std::vector<std::pair<Plan, std::string>> refinements(const Plan& plan) {
  std::vector<std::pair<Plan, std::string>> variants;
  const int count = static_cast<int>(plan.units.size());
  variants.emplace_back(with_prefetch_depth(plan, 2), "prefetch 2 ahead");
  variants.emplace_back(with_prefetch_depth(plan, 0), "no prefetch");
  // The last 1..8 units kept gathered, then 12, 16, 24, 32, ... (the wrapping search chooses this jointly; here it
  // reaches the settings it gave up on too, at a bounded cost).
  for (int keep = 1; keep < count; keep += keep < 8 ? 1 : keep / 2) {
    Plan kept = plan;
    bool any = false;
    for (int id = count - keep; id < count; ++id) {
      auto& unit = kept.units[static_cast<std::size_t>(id)];
      if (unit.reshard_after_forward.enabled) any = true;
      unit.reshard_after_forward.enabled = false;
    }
    if (any) variants.emplace_back(kept, "last " + std::to_string(keep) + " unit(s) kept gathered");
  }
  return variants;
}

}  // namespace

namespace {

SearchResult search_plans_at(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                             const TrainingConfig& training, const SearchOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  SearchResult result;
  result.memory_cap_bytes = options.memory_cap_bytes > 0 ? options.memory_cap_bytes : cluster.gpu.memory_bytes;
  // Note [Memory headroom]: every fits test below compares with the cap less the headroom; the wrap search's floor
  // (an allocated peak, never above the device peak) prunes soundly against it.
  const MemoryHeadroom headroom{result.memory_cap_bytes, options.memory_headroom_fraction};
  result.memory_headroom_bytes = headroom.headroom_bytes();
  result.memory_headroom_fraction = options.memory_headroom_fraction;
  validate_training(training, model);
  SHARDPLAN_CHECK(model.finetune == training.finetune, "the model was not resolved for the training's fine-tuning");
  // Note [Uniform requires_grad] (plan.h): a front end no wrapping can satisfy is the user's to change, not a search.
  if (training.finetune.fsdp.uniform_requires_grad()) {
    if (const std::string conflict = requires_grad_conflict(model); !conflict.empty()) {
      throw InputError("plan: " + conflict);
    }
  }
  Searcher searcher(model, cluster, profile, training, options, result.usable_memory_bytes());
  searcher.run(false);
  // The last resort, where nothing fits (a plan known from another search fits).
  const bool known = options.known_step_s < std::numeric_limits<double>::infinity();
  if (!searcher.found_fit() && options.allow_offload && !known) searcher.run(true);
  if (options.with_baselines) {
    result.baselines = baseline_plans(model, cluster, profile, training, result.usable_memory_bytes());
    // A baseline that fits is a candidate too, so the planned plan is never slower than the best fitting baseline.
    // Note [Pinned knobs]: only where it keeps every knob the user pinned.
    for (const auto& baseline : result.baselines) {
      if (!options.pins.admits(baseline.candidate.plan)) continue;
      searcher.evaluate(baseline.candidate.plan, "baseline " + baseline.name);
    }
  }
  if (searcher.found_fit() && options.refine) {
    // Note [Refining unproven settings]: the best plan, and the best of each unproven setting close to it.
    std::vector<PlanCandidate> bases = searcher.unproven_near_best(kRefinedWindow);
    bases.insert(bases.begin(), searcher.best());
    for (const PlanCandidate& base : bases) {
      for (const auto& [variant, how] : refinements(base.plan)) searcher.evaluate(variant, base.knobs + ", " + how);
    }
  }
  result.feasible = searcher.found_fit();
  result.candidates_evaluated = searcher.evaluated();
  result.exact_settings = searcher.exact_settings();
  result.fallback_settings = searcher.fallback_settings();
  result.kept_by_refinement_settings = searcher.kept_by_refinement_settings();
  result.floor_settings = searcher.beaten_by_floor_settings();
  result.memory_floor_settings = searcher.memory_floor_settings();
  result.heuristic_settings = searcher.heuristic_settings();
  result.partitions_only_settings = searcher.partitions_only_settings();
  if (result.feasible) {
    result.best = searcher.best();
    result.best.plan.name = "planned";
    result.host_memory = host_memory_use(result.best.plan, model, cluster);
  } else if (!known) {
    // Strategies whose model states alone exceed the cap were never simulated: make sure the leanest plan
    // (full_shard, full AC, micro-batch 1) is among those the diagnosis compares. Note [Optimizer in backward]: with
    // it, the micro-batch one_micro_batch_per_step gave (no accumulation).
    KnobSetting lean{ShardingStrategy{}, "full", training.optimizer_in_backward ? training.micro_batch : 1, false};
    searcher.evaluate(plan_for_knobs(model, cluster, training, lean), lean.label() + ", per block");
    // Offload settings whose states no node could hold were skipped (Note [Host memory]): simulate the leanest, so
    // the diagnosis can say whether host memory is what stands in the way.
    std::optional<PlanCandidate> lean_offload;
    if (options.allow_offload) {
      const KnobSetting knobs{ShardingStrategy{}, "full", 1, true};
      lean_offload = searcher.evaluate(plan_for_knobs(model, cluster, training, knobs), knobs.label() + ", per block");
    }
    const PlanCandidate smallest = searcher.smallest();
    result.candidates_evaluated = searcher.evaluated();
    result.diagnosis = diagnose(model, cluster, profile, training, smallest, lean_offload ? &*lean_offload : nullptr,
                                result.usable_memory_bytes());
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

// The better of two searches: a feasible one, then the objective's order (time: step time; memory: peak).
bool better_search(const SearchResult& candidate, const SearchResult& best, SearchObjective objective) {
  if (candidate.feasible != best.feasible) return candidate.feasible;
  if (!candidate.feasible) return false;
  const auto& a = candidate.best.summary;
  const auto& b = best.best.summary;
  return objective == SearchObjective::memory ? a.peak_memory_bytes < b.peak_memory_bytes
                                              : a.step_time_s < b.step_time_s;
}

}  // namespace

SearchResult search_fsdp_plans(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                               const TrainingConfig& training, const SearchOptions& options) {
  if (options.expert_parallel_degrees.size() <= 1) {  // one degree (a model without experts): a plain search
    TrainingConfig with_degree = training;
    if (!options.expert_parallel_degrees.empty()) with_degree.expert_parallel_degree = options.expert_parallel_degrees[0];
    SearchResult result = search_plans_at(model, cluster, profile, with_degree, options);
    if (result.feasible && with_degree.expert_parallel_degree > 1) {
      result.best.knobs += ", expert parallel " + std::to_string(with_degree.expert_parallel_degree);
    }
    return result;
  }
  // Note [Expert parallelism] (unit_layout.h): each degree is its own search (it changes every MoE unit's gathers,
  // reductions and all-to-alls); the best fitting plan of them all wins, its knobs naming the degree.
  std::optional<SearchResult> best;
  std::size_t evaluated = 0;
  double seconds = 0;
  for (const int degree : options.expert_parallel_degrees) {
    TrainingConfig with_degree = training;
    with_degree.expert_parallel_degree = degree;
    // Each degree's search wants only plans faster than the best so far (SearchOptions::known_step_s).
    SearchOptions degree_options = options;
    if (best && best->feasible && options.objective == SearchObjective::time) {
      degree_options.known_step_s = std::min(options.known_step_s, best->best.summary.step_time_s);
    }
    SearchResult result = search_plans_at(model, cluster, profile, with_degree, degree_options);
    evaluated += result.candidates_evaluated;
    seconds += result.seconds;
    // The best may be a baseline, which runs FSDP alone.
    if (result.feasible) {
      result.best.knobs += ", expert parallel " + std::to_string(result.best.plan.training.expert_parallel_degree);
    }
    if (!best || better_search(result, *best, options.objective)) best = std::move(result);
  }
  best->candidates_evaluated = evaluated;
  best->seconds = seconds;
  return std::move(*best);
}

}  // namespace shardplan
