// Searcher::search_setting (searcher.h): one knob setting's pass — its one-ahead wrap search, the tightened-floor
// searches where that gave up, the per-cap DPs, and the search over prefetch depths.
#include "searcher.h"

#include <algorithm>
#include <map>

#include "context_parallel_lowering.h"
#include "errors.h"
#include "memory_headroom.h"

namespace shardplan::search_internal {

namespace {

// The wrap search's simulation budget per knob setting, in block passes: wrappings simulated × blocks × (micro-batches
// per step + 2) (a wrapping's simulation costs about its blocks' forwards and backwards of every micro-batch, and its
// gathers, reductions and optimizer step about two passes more), so long models and many micro-batches per step get
// fewer checks (Searcher::search_setting). One micro-batch per step: 20,000 simulated blocks, as measured sufficient
// for the exhaustive-equality tests; 128 (issue 37 item 7: gpt2 on 2xcpu with --global-batch 256) no longer
// simulates ~9,500 wrappings.
constexpr std::size_t kSimulatedBlockPassesPerSetting = 60000;

// Note [Tightened floor]: a wrap search gives up when too many wrappings pass the memory floor (a lower bound of the
// simulated peak) without fitting, or its best-first tree outgrows its node budget; and its label DP drops the
// per-unit kept-gathered choice when a state's labels outgrow their budget (then it is exact over partitions only).
// Both happen more, not less, as the cap loosens (more labels pass the floor), so a looser cap could answer slower
// than a tighter one (issue 31 item 6: llama2-7b on 8xA100-40GB, 0.9750 s at 40 GiB against 0.9747 s at 38 GiB).
// So the search runs again with the floor's cap lowered by a fraction of the cap, the simulator still judging fit
// against the real cap: fewer wrappings and labels pass a tighter floor, so the tree and the Pareto sets stay small,
// and whatever it finds fits. An answer found under a floor cap at or above a tighter user cap is at least as fast as
// that cap's exact answer (that wrapping passes the floor too); the setting stays heuristic (or partitions-only) in
// the output either way. Fractions: the memory error of the published-runs check is a few percent (Note [Memory
// headroom]), so doubling steps from 1 % to 32 % cover a floor that far below the peak; a bisection then raises the
// floor cap that answers to within half the last step (a higher floor cap admits every wrapping a lower one
// does, so its exact answer is no slower).
constexpr double kFirstFloorTightening = 0.01, kLastFloorTightening = 0.32;
constexpr int kFloorBisections = 1;
// A tightened search mostly answers with its first wrapping, the label DP's under the tightened floor; a small tree
// budget past it keeps the ones that do not answer cheap (each node places fragments: ~7 us measured here).
constexpr std::size_t kTightenedSearchNodes = 256;

// "<knobs>, <how>, N unit(s) kept gathered": a candidate's description (kept flags count only where the template
// reshards after forward; elsewhere every unit stays gathered anyway).
std::string describe(const std::string& knobs, const std::string& how, const std::vector<bool>& kept,
                     const Plan& base) {
  const bool reshards = base.units.at(base.units.size() > 1 ? 1 : 0).reshard_after_forward.enabled;
  const auto kept_count = reshards ? std::count(kept.begin(), kept.end(), true) : 0;
  return knobs + ", " + how + (kept_count > 0 ? ", " + std::to_string(kept_count) + " unit(s) kept gathered" : "");
}

}  // namespace

// One pass over one knob setting (SettingRun); one_ahead and depths: true when the search finished. Reads nothing
// of the searcher that a wave's runs change: it may run beside the other runs of its wave.
bool Searcher::search_setting(SettingRun& run) {
  const KnobSetting& knobs = run.knobs;
  const Pass pass = run.pass;
  // Note [Fixed context parallel degree]: on a CP rank's share, the CP plan the share's plan stands for, so the wrap
  // fragments are the CP rank's program, its ring included.
  const Plan base = context_parallel_plan_of_share(plan_for_knobs(model_, cluster_, training_, knobs),
                                                   options_.context_parallel_degree);
  const std::string label = knobs.label();
  const int world = cluster_.world_size(), gpus_per_node = cluster_.gpus_per_node;
  // partition (unit ends, 0 after a unit kept gathered) → the simulator's verdict
  std::map<std::vector<std::size_t>, WrapCheck> seen;
  const auto try_units = [&](const std::vector<LayerRange>& units, const std::string& how,
                             const std::vector<bool>& kept = {}) {
    std::vector<std::size_t> key;
    for (std::size_t k = 0; k < units.size(); ++k) {
      key.push_back(units[k].end);
      if (!kept.empty() && kept[k]) key.push_back(0);
    }
    if (const auto found = seen.find(key); found != seen.end()) return found->second;
    const PlanCandidate candidate =
        evaluate_in(run, plan_with_units(model_, base, units, kept), describe(label, how, kept, base), label);
    const WrapCheck verdict{candidate.fits, candidate.summary.step_time_s, candidate.summary.peak_memory_bytes};
    seen.emplace(key, verdict);
    return verdict;
  };
  WrapSearchOptions wrap;
  wrap.max_unit_blocks = *std::max_element(options_.max_unit_blocks.begin(), options_.max_unit_blocks.end());
  wrap.memory_cap_bytes = cap_;
  wrap.per_unit_reshard = options_.per_unit_reshard;
  // Branch and bound simulates every wrapping whose modelled time is below the answer's simulated time where the
  // model is a lower bound: a budget in simulated block passes keeps long models' and many micro-batches' searches
  // short; past it tightened floors and the per-cap DPs answer.
  const std::size_t passes_per_block = static_cast<std::size_t>(std::max(1, base.grad_accumulation_steps)) + 2;
  const std::size_t blocks = std::max<std::size_t>(1, model_.block_count());
  wrap.max_checks =
      std::max<std::size_t>(kMaxWrapChecks, kSimulatedBlockPassesPerSetting / (blocks * passes_per_block));
  if (pass == Pass::depths) {
    // Note [Prefetch depth]: the fastest fitting plan over wrappings × none / one / two units ahead, by branch and
    // bound on the one-ahead fragments with free all-gathers and free collective issue. That is a lower bound for
    // every depth: shortening durations never lengthens the simulated step (Note [Monotone walk]), and with free
    // gathers every wait is met where it is reached, whatever the depth issued it. Its floor counts only certainly
    // live bytes, which do not depend on where a gather is issued. True when the search finished.
    const ShardingLayout layout = resolve_sharding(base.units.at(1).strategy, world, gpus_per_node);
    if (!layout.params_sharded()) return true;  // nothing is gathered: every depth is the same plan
    TimingRelaxation free_gathers;
    free_gathers.free_all_gathers = true;
    free_gathers.free_collective_issue = true;
    std::shared_ptr<FragmentCache>& cache = *run.cache;
    WrapFragments fragments(model_, base, profile_, world, gpus_per_node, free_gathers, cache);
    cache = fragments.cache();
    wrap.floor_for_any_prefetch_depth = true;
    wrap.label_dp_max_labels = options_.depth_search_dp_labels;  // Note [Bound-only wrap search]
    wrap.stop_above_s = incumbent_s(run);
    wrap.check = [&](const std::vector<LayerRange>& units, const std::vector<bool>& kept) {
      WrapCheck best = try_units(units, "fastest fitting wrapping", kept);
      const Plan built = plan_with_units(model_, base, units, kept);
      for (int depth : {0, 2}) {
        const PlanCandidate candidate =
            evaluate_in(run, with_prefetch_depth(built, depth),
                     describe(label, depth == 0 ? "fastest fitting wrapping, no prefetch"
                                                : "fastest fitting wrapping, prefetch 2 ahead",
                              kept, base),
                     label);
        if (candidate.fits && (!best.fits || candidate.summary.step_time_s < best.step_s)) {
          best = {true, candidate.summary.step_time_s, candidate.summary.peak_memory_bytes};
        }
      }
      return best;
    };
    // A search that finished without the kept-gathered choice (its labels outgrew their budget) is exact over
    // partitions only: not a proof for the setting, which then counts as heuristic (run_prefetch_depths).
    const WrapSearchResult searched = fastest_fitting_wrapping(fragments, wrap);
    return !searched.gave_up && !searched.reshard_choice_dropped;
  }
  // The fastest wrapping whose simulated peak fits, or none that fits and beats the best plan so far
  // (Note [Wrap search]). For --objective memory, the fastest at the setting's least peak (Note [Least peak]).
  std::shared_ptr<FragmentCache>& cache = *run.cache;
  WrapFragments fragments(model_, base, profile_, world, gpus_per_node, {}, cache);
  cache = fragments.cache();
  if (options_.objective == SearchObjective::time) wrap.stop_above_s = incumbent_s(run);
  std::int64_t first_peak_bytes = 0;  // the first wrapping simulated: the label DP's under the floor
  wrap.check = [&](const std::vector<LayerRange>& units, const std::vector<bool>& kept) {
    WrapCheck verdict = try_units(units, "fastest fitting wrapping", kept);
    if (first_peak_bytes == 0) first_peak_bytes = verdict.peak_bytes;
    // The least peak, for --objective memory; the device peak within the cap less the headroom either way.
    verdict.fits = verdict.fits && verdict.peak_bytes <= wrap.memory_cap_bytes;
    return verdict;
  };
  if (pass == Pass::tightened) {
    search_tightened_floors(run, fragments, wrap);
    return true;
  }
  bool searchable = true;
  if (options_.objective == SearchObjective::memory) {
    // No wrapping of this setting can beat a fitting plan with a lower peak (equal peaks: the faster wins).
    const PlanCandidate& best_fit = run.best_fit;
    const std::int64_t above = best_fit.fits ? std::min(cap_, best_fit.summary.peak_memory_bytes) : cap_;
    const LeastPeakResult least = least_peak_wrapping(fragments, wrap, above);
    searchable = !least.gave_up;
    if (searchable && (!least.found || least.peak_bytes > above)) {
      ++run.exact;  // proven: nothing here fits at or below the best peak so far
      return true;
    }
    wrap.memory_cap_bytes = least.peak_bytes;
    if (best_fit.fits && best_fit.summary.peak_memory_bytes == least.peak_bytes) {
      wrap.stop_above_s = best_fit.summary.step_time_s;
    }
  }
  if (searchable) {
    const WrapSearchResult searched = fastest_fitting_wrapping(fragments, wrap);
    if (!searched.gave_up) {
      ++run.exact;
      if (searched.reshard_choice_dropped) {
        ++run.kept_by_refinement;
        run.partitions_only.push_back(label);
        // Note [Tightened floor]: the kept-gathered choice back, under tighter floors (after the first pass).
        if (options_.objective == SearchObjective::time) run.tighten_later = 0;
      }
      return true;
    }
  }
  ++run.fallback;  // too many wrappings to simulate: tightened floors and the per-cap DPs instead
  run.heuristic.push_back(label);
  // Note [Tightened floor]: where the simulator refused the label DP's wrapping, the same search with the floor's
  // cap lowered step by step, the simulator still judging against the real cap (after the first pass).
  if (options_.objective == SearchObjective::time && first_peak_bytes > cap_) {
    run.tighten_later = first_peak_bytes;
  }
  for (int cap_blocks : options_.max_unit_blocks) {
    WrapDpOptions dp_options;
    dp_options.max_unit_blocks = cap_blocks;
    const WrapDpResult dp = best_wrapping(fragments, dp_options);
    const bool dp_fits = dp.found && try_units(dp.units, "DP <= " + std::to_string(cap_blocks) + " blocks/unit").fits;
    const bool uniform_fits = try_units(wrap_blocks(model_, static_cast<std::size_t>(cap_blocks)).units,
                                        std::to_string(cap_blocks) + " blocks/unit")
                                  .fits;
    // Larger units only add gathered memory: once neither candidate of this cap fits, larger caps will not.
    if (!dp_fits && !uniform_fits) break;
  }
  return false;
}

// Note [Tightened floor]: the search again under floor caps lowered by the first wrapping's overshoot of the cap
// (its floor was within the cap, its simulated peak `first_peak_bytes` above it; 1 % where none was refused),
// then twice that, ... until one answers — finishes or simulates a wrapping that fits, with the kept-gathered
// choice kept — then bisected between the last that did not and it. `check` still reads the real cap in `wrap`.
// A tightened search whose label DP outgrew its budget without the kept choice ends the ladder (one that outgrew
// it with the choice does not search without it: a tighter floor may bring the choice back).
void Searcher::search_tightened_floors(SettingRun& run, WrapFragments& fragments, const WrapSearchOptions& wrap) {
  const std::int64_t first_peak_bytes = run.refused_peak_bytes;
  enum class Outcome { answered, missed, overflowed };
  const auto search = [&](double tightening) {
    bool fitted = false;
    WrapSearchOptions tightened = wrap;
    tightened.memory_cap_bytes = static_cast<std::int64_t>(static_cast<double>(cap_) * (1.0 - tightening));
    tightened.stop_above_s = incumbent_s(run);
    tightened.max_search_nodes = kTightenedSearchNodes;
    tightened.give_up_without_choice = tightened.per_unit_reshard;
    tightened.check = [&](const std::vector<LayerRange>& units, const std::vector<bool>& kept) {
      const WrapCheck verdict = wrap.check(units, kept);
      fitted = fitted || verdict.fits;
      return verdict;
    };
    const WrapSearchResult searched = fastest_fitting_wrapping(fragments, tightened);
    if (searched.gave_up && searched.checked == 0 && !searched.reshard_choice_dropped) return Outcome::overflowed;
    return (!searched.gave_up || fitted) && !searched.reshard_choice_dropped ? Outcome::answered : Outcome::missed;
  };
  const double overshoot = static_cast<double>(first_peak_bytes - cap_) / static_cast<double>(cap_);
  double missed = 0, answered = std::max(kFirstFloorTightening, overshoot);
  for (Outcome outcome; (outcome = search(answered)) != Outcome::answered;) {
    missed = answered;
    answered *= 2;
    if (outcome == Outcome::overflowed || answered > kLastFloorTightening) return;
  }
  for (int step = 0; step < kFloorBisections; ++step) {
    const double middle = 0.5 * (missed + answered);
    (search(middle) == Outcome::answered ? answered : missed) = middle;
  }
}

}  // namespace shardplan::search_internal
