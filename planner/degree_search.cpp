// DegreeSearch (degree_search.h): one degree's search in stages — the Searcher's passes over its knob settings, then
// the baselines, refinements and the infeasibility diagnosis — and search_degrees, the degrees stage by stage with one
// incumbent (Note [Shared incumbent]).
#include "degree_search.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <utility>

#include "errors.h"
#include "indexed_pool.h"
#include "infeasible_diagnosis.h"
#include "memory_headroom.h"
#include "searcher.h"
#include "unit_layout.h"

namespace shardplan::search_internal {
namespace {

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

// Adds the time a stage took to `seconds`.
class StageClock {
 public:
  explicit StageClock(double& seconds) : seconds_(seconds) {}
  ~StageClock() { seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count(); }
  StageClock(const StageClock&) = delete;
  StageClock& operator=(const StageClock&) = delete;

 private:
  double& seconds_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace

DegreeSearch::DegreeSearch(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                           const TrainingConfig& training, const SearchOptions& options)
    : model_(model), cluster_(cluster), profile_(profile), training_(training), options_(options) {
  const StageClock clock(seconds_);
  result_.memory_cap_bytes = options.memory_cap_bytes > 0 ? options.memory_cap_bytes : cluster.gpu.memory_bytes;
  // Note [Memory headroom]: every fits test below compares with the cap less the headroom; the wrap search's floor
  // (an allocated peak, never above the device peak) prunes soundly against it.
  const MemoryHeadroom headroom{result_.memory_cap_bytes, options.memory_headroom_fraction};
  result_.memory_headroom_bytes = headroom.headroom_bytes();
  result_.memory_headroom_fraction = options.memory_headroom_fraction;
  validate_training(training, model);
  SHARDPLAN_CHECK(model.finetune == training.finetune, "the model was not resolved for the training's fine-tuning");
  // Note [Uniform requires_grad] (plan.h): a front end no wrapping can satisfy is the user's to change, not a search.
  if (training.finetune.fsdp.uniform_requires_grad()) {
    if (const std::string conflict = requires_grad_conflict(model); !conflict.empty()) {
      throw InputError("plan: " + conflict);
    }
  }
  searcher_ = std::make_unique<Searcher>(model, cluster, profile, training, options, result_.usable_memory_bytes());
}

DegreeSearch::~DegreeSearch() = default;

double DegreeSearch::best_step_s() const {
  return searcher_->found_fit() ? searcher_->best().summary.step_time_s : std::numeric_limits<double>::infinity();
}

void DegreeSearch::search_wrappings(double known_step_s) {
  const StageClock clock(seconds_);
  searcher_->know_step_s(known_step_s);
  searcher_->run_wrappings(false);
  // Note [Shared incumbent]: the best plan refined now, so the degrees after this one prune with its refined step
  // (finish refines it again only if a later pass found a better one).
  if (searcher_->found_fit() && options_.refine) refine(searcher_->best());
}

void DegreeSearch::search_tightened_floors(double known_step_s) {
  const StageClock clock(seconds_);
  searcher_->know_step_s(known_step_s);
  searcher_->run_tightened_floors();
  // Note [Shared incumbent]: refined now, as search_wrappings does.
  if (searcher_->found_fit() && options_.refine) refine(searcher_->best());
}

void DegreeSearch::refine(const PlanCandidate& given) {
  const PlanCandidate base = given;  // `given` may be the searcher's best, which a variant evaluated below replaces
  refined_.emplace_back(base.knobs, base.summary.step_time_s);
  std::vector<std::pair<Plan, std::string>> variants;
  for (auto& [variant, how] : refinements(base.plan)) {
    variants.emplace_back(std::move(variant), base.knobs + ", " + how);
  }
  // A variant is not refined again (finish): its own variants are its base's.
  for (const PlanCandidate& evaluated : searcher_->evaluate_all(variants)) {
    refined_.emplace_back(evaluated.knobs, evaluated.summary.step_time_s);
  }
}

void DegreeSearch::search_prefetch_depths(double known_step_s) {
  const StageClock clock(seconds_);
  searcher_->know_step_s(known_step_s);
  searcher_->run_prefetch_depths();
  // The last resort, where nothing fits (a plan known from another search fits).
  const bool known = searcher_->known_step_s() < std::numeric_limits<double>::infinity();
  if (!searcher_->found_fit() && options_.allow_offload && !known) searcher_->run(true);
}

SearchResult DegreeSearch::finish() {
  const StageClock clock(seconds_);
  Searcher& searcher = *searcher_;
  SearchResult& result = result_;
  const bool known = searcher.known_step_s() < std::numeric_limits<double>::infinity();
  if (options_.with_baselines) {
    result.baselines = baseline_plans(model_, cluster_, profile_, training_, result.usable_memory_bytes());
    // A baseline that fits is a candidate too, so the planned plan is never slower than the best fitting baseline.
    // Note [Pinned knobs]: only where it keeps every knob the user pinned.
    std::vector<std::pair<Plan, std::string>> admitted;
    for (const auto& baseline : result.baselines) {
      if (options_.pins.admits(baseline.candidate.plan)) {
        admitted.emplace_back(baseline.candidate.plan, "baseline " + baseline.name);
      }
    }
    searcher.evaluate_all(admitted);
  }
  if (searcher.found_fit() && options_.refine) {
    // Note [Refining unproven settings]: the best plan, and the best of each unproven setting close to it.
    std::vector<PlanCandidate> bases = searcher.unproven_near_best(kRefinedWindow);
    bases.insert(bases.begin(), searcher.best());
    for (const PlanCandidate& base : bases) {
      const std::pair<std::string, double> key{base.knobs, base.summary.step_time_s};
      if (std::find(refined_.begin(), refined_.end(), key) == refined_.end()) refine(base);
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
  result.unproven_floor_s = searcher.unproven_floor_s();
  result.unproven_floor_setting = searcher.unproven_floor_setting();
  if (result.feasible) {
    result.best = searcher.best();
    result.best.plan.name = "planned";
    result.host_memory = host_memory_use(result.best.plan, model_, cluster_);
  } else if (!known) {
    // Strategies whose model states alone exceed the cap were never simulated: make sure the leanest plan
    // (full_shard, full AC, micro-batch 1) is among those the diagnosis compares. Note [Optimizer in backward]: with
    // it, the micro-batch one_micro_batch_per_step gave (no accumulation).
    KnobSetting lean{ShardingStrategy{}, "full", training_.optimizer_in_backward ? training_.micro_batch : 1, false};
    searcher.evaluate(plan_for_knobs(model_, cluster_, training_, lean), lean.label() + ", per block");
    // Offload settings whose states no node could hold were skipped (Note [Host memory]): simulate the leanest, so
    // the diagnosis can say whether host memory is what stands in the way.
    std::optional<PlanCandidate> lean_offload;
    if (options_.allow_offload) {
      const KnobSetting knobs{ShardingStrategy{}, "full", 1, true};
      lean_offload = searcher.evaluate(plan_for_knobs(model_, cluster_, training_, knobs), knobs.label() + ", per block");
    }
    const PlanCandidate smallest = searcher.smallest();
    result.candidates_evaluated = searcher.evaluated();
    result.diagnosis = diagnose(model_, cluster_, profile_, training_, smallest, lean_offload ? &*lean_offload : nullptr,
                                result.usable_memory_bytes());
  }
  result.seconds = seconds_;
  return std::move(result);
}

SearchResult search_one_degree(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                               const TrainingConfig& training, const SearchOptions& options) {
  DegreeSearch search(model, cluster, profile, training, options);
  search.search_wrappings(options.known_step_s);
  search.search_prefetch_depths(options.known_step_s);
  return search.finish();
}

std::vector<DegreeOutcome> search_degrees(const std::vector<DegreeInput>& degrees, const HardwareProfile& profile) {
  std::vector<DegreeOutcome> outcomes(degrees.size());
  std::vector<std::unique_ptr<DegreeSearch>> searches(degrees.size());
  const bool shared = !degrees.empty() && degrees.front().options.objective == SearchObjective::time;
  double incumbent_s = std::numeric_limits<double>::infinity();
  // Runs one stage of one degree; a degree that throws drops out with its exception.
  const auto stage = [&](std::size_t index, auto&& step) {
    if (!searches[index]) return;
    try {
      step(*searches[index]);
      if (shared) incumbent_s = std::min(incumbent_s, searches[index]->best_step_s());
    } catch (...) {
      outcomes[index].failure = std::current_exception();
      searches[index].reset();
    }
  };
  for (std::size_t index = 0; index < degrees.size(); ++index) {
    const DegreeInput& degree = degrees[index];
    try {
      searches[index] = std::make_unique<DegreeSearch>(degree.model, degree.cluster, profile, degree.training,
                                                       degree.options);
    } catch (...) {
      outcomes[index].failure = std::current_exception();
      continue;
    }
    if (!shared) stage(index, [&](DegreeSearch& search) { search.search_wrappings(incumbent_s); });
  }
  if (shared) {
    // Note [Joint setting order] (searcher.h): the degrees' one-ahead passes as one, then each tightened pass.
    // Each degree's order (its settings' floors, one lowering per checkpointing pattern and micro-batch) on the
    // threads: a degree reads its own searcher and the shared floor cache only; then in degree order, as stage().
    std::vector<SettingOrder> computed(degrees.size());
    std::vector<std::exception_ptr> order_failures(degrees.size());
    run_indexed(degrees.size(), degrees.front().options.threads, [&](std::size_t index) {
      if (!searches[index]) return;
      try {
        computed[index] = searches[index]->searcher().one_ahead_order(false);
      } catch (...) {
        order_failures[index] = std::current_exception();
      }
    });
    std::vector<Searcher*> searchers;
    std::vector<SettingOrder> orders;
    std::vector<std::size_t> joined;
    for (std::size_t index = 0; index < degrees.size(); ++index) {
      stage(index, [&](DegreeSearch& search) {
        if (order_failures[index]) std::rethrow_exception(order_failures[index]);
        orders.push_back(std::move(computed[index]));
        searchers.push_back(&search.searcher());
        joined.push_back(index);
      });
    }
    const std::vector<std::exception_ptr> failures = run_one_ahead_jointly(searchers, orders);
    for (std::size_t at = 0; at < joined.size(); ++at) {
      if (!failures[at]) continue;
      outcomes[joined[at]].failure = failures[at];  // that degree drops out, as stage() drops one
      searches[joined[at]].reset();
    }
    for (std::size_t index : joined) {
      stage(index, [&](DegreeSearch& search) { search.search_tightened_floors(incumbent_s); });
    }
  }
  for (std::size_t index = 0; index < degrees.size(); ++index) {
    stage(index, [&](DegreeSearch& search) { search.search_prefetch_depths(incumbent_s); });
    if (!searches[index]) continue;
    try {
      outcomes[index].result = searches[index]->finish();
      searches[index].reset();  // its windows and candidates: the next degree's depth pass may need the memory
      const SearchResult& result = *outcomes[index].result;
      if (shared && result.feasible) incumbent_s = std::min(incumbent_s, result.best.summary.step_time_s);
    } catch (...) {
      outcomes[index].failure = std::current_exception();
    }
  }
  return outcomes;
}

}  // namespace shardplan::search_internal
