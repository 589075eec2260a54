// The joint plan search: per knob setting the exact wrap searches (one-ahead, then prefetch depths), re-simulation,
// refinements and the infeasibility diagnosis (knob settings: knob_settings.cpp; baselines: baselines.cpp).
#include "search.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "errors.h"
#include "indexed_pool.h"
#include "infeasible_diagnosis.h"
#include "memory_headroom.h"
#include "plan_json.h"
#include "step_analysis.h"
#include "unit_layout.h"
#include "wrap_dp.h"

namespace shardplan {
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
// Note [Refining unproven settings]: the refinements (prefetch 0 or 2 ahead, the last units kept gathered) are tried
// on the best plan; a proven setting's search covered them already (jointly, where it finished), an unproven one's did
// not, so a heuristic setting's answer a little slower than the best can refine to below it (llama3-70b on 32x8 H100
// with --ac full: full_shard's per-cap DP answer refined to 9.4671 s while hybrid_shard:128's tightened-floor answer,
// the best before refinement, refined only to 9.4761 s). So each unproven setting's best within this fraction of the
// best plan's step is refined too; refinements gain well under 1 % there, so a 1 % window misses none seen.
constexpr double kRefinedWindow = 0.01;

// Note [Setting waves]: the knob settings of a pass are searched in waves of this many, on the search's threads
// (SearchOptions::threads): every search of a wave prunes with the best plan found before the wave (and with its own
// plans), and the wave's results are merged in setting order. The waves do not depend on the thread count, so
// neither does the result (a test says so); a wave's later settings miss what its earlier ones find, so they prune a
// little less than one at a time would — which this fixed width bounds. The one-ahead pass starts with a wave of one
// setting (the smallest compute floor), whose answer the others prune with.
constexpr std::size_t kSettingsPerWave = 8;

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

class Searcher {
 public:
  // The passes over a knob setting: the one-ahead wrapping search; the tightened-floor searches of the settings whose
  // one-ahead search gave up or dropped the kept choice (Note [Tightened floor]); the search over prefetch depths.
  enum class Pass { one_ahead, tightened, depths };

  // One pass over one knob setting (Note [Setting waves]): what it reads — the best plan when its wave started, then
  // its own better ones — and what it produced, merged into the searcher in setting order after the wave.
  struct SettingRun {
    KnobSetting knobs;
    Pass pass = Pass::one_ahead;
    // tightened: the simulated peak of the wrapping the one-ahead search's label DP gave, above the cap; 0 when the
    // search finished without the kept choice.
    std::int64_t refused_peak_bytes = 0;
    double floor_s = 0;
    PlanCandidate best_fit;
    std::shared_ptr<FragmentCache>* cache = nullptr;  // the setting's windows (cache_for), one run at a time
    std::vector<std::pair<PlanCandidate, std::string>> evaluated;  // in order, with the setting each counts for
    bool finished = true;  // one_ahead and depths: the search finished
    std::size_t exact = 0, fallback = 0, kept_by_refinement = 0;
    std::vector<std::string> heuristic, partitions_only;
    std::optional<std::int64_t> tighten_later;  // Note [Tightened floor]: with the refused peak (0: none refused)

    SettingRun(const KnobSetting& setting, Pass of_pass, double setting_floor_s, std::int64_t refused_bytes = 0)
        : knobs(setting), pass(of_pass), refused_peak_bytes(refused_bytes), floor_s(setting_floor_s) {}
  };

  Searcher(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile, const TrainingConfig& training,
           const SearchOptions& options, std::int64_t cap)
      : model_(model), cluster_(cluster), profile_(profile), training_(training), options_(options), cap_(cap) {}

  // A plan simulated and counted (baselines, refinements, the diagnosis's lean plans).
  PlanCandidate evaluate(const Plan& plan, const std::string& knobs) {
    PlanCandidate candidate = simulated(plan, knobs);
    record(candidate, {});
    return candidate;
  }

  // Whether any plan of `knobs` can fit. A lower bound of its peak: the model states of the whole model as one flat
  // parameter (padded once, so no wrapping's shards are smaller: Σ ceil(Ψ_i / g) >= ceil(Ψ / g)), by the lowering's own
  // per-unit sizes and persistent memory, plus the overhead, plus the activations one micro-batch's passes hold at
  // once (Note [Activation floor]). When that exceeds the cap, no wrapping can help, so the setting is skipped (sound
  // pruning). Offloading, the same floor of the host memory a node needs (Note [Host memory]) skips settings whose
  // states no node here could hold.
  bool can_fit(const KnobSetting& knobs) {
    if (knobs.offload && cluster_.host_memory_bytes_per_node > 0 &&
        host_memory_floor_per_node(knobs.strategy, {true, false}, model_, training_, cluster_) >
            cluster_.host_memory_bytes_per_node) {
      return false;
    }
    const UnitLayout layout =
        states_floor_layout(knobs.strategy, model_, training_, cluster_.world_size(), cluster_.gpus_per_node);
    Plan states_only;
    states_only.training = training_;
    states_only.offload.params = knobs.offload;
    const MemoryByCategory persistent = persistent_memory({layout}, states_only, profile_.context_overhead_bytes);
    std::int64_t bytes = 0;
    for (const std::int64_t category_bytes : persistent) bytes += category_bytes;
    // The states alone first: where they exceed the cap, the activation floor's lowering is not needed.
    return bytes <= cap_ && bytes + floors(knobs).activation_peak_bytes <= cap_;
  }

  // Note [Compute floor] and Note [Activation floor]; one lowering per checkpointing pattern, micro-batch and offload
  // (the kernels and activations do not depend on the sharding strategy, which changes collectives and shards only).
  const SettingFloors& floors(const KnobSetting& knobs) {
    KnobSetting kernels_key = knobs;
    kernels_key.strategy = ShardingStrategy{};
    const auto [known, inserted] = floors_.try_emplace(kernels_key.label());
    if (inserted) known->second = setting_floors(model_, cluster_, profile_, training_, knobs);
    return known->second;
  }
  double compute_floor(const KnobSetting& knobs) { return floors(knobs).compute_s; }

  // True when no plan of a setting whose compute floor is `floor_s` can beat the best fitting plan so far (by time;
  // an equal time could still win on peak, so only a strictly larger floor skips).
  bool beaten_by_incumbent(double floor_s) const {
    return options_.objective == SearchObjective::time && floor_s > incumbent_s();
  }
  // The step time to beat: the best fitting plan so far, or one known from another search (SearchOptions::known_step_s).
  double incumbent_s() const { return incumbent_s(best_fit_); }
  double incumbent_s(const SettingRun& run) const { return incumbent_s(run.best_fit); }
  double incumbent_s(const PlanCandidate& best_fit) const {
    return std::min(options_.known_step_s, best_fit.fits ? best_fit.summary.step_time_s
                                                         : std::numeric_limits<double>::infinity());
  }

  void run(bool offload) {
    // Best first over knob settings (DESIGN.md "One search driver"): settings in nondecreasing compute floor, so the
    // incumbent is fast early and every setting whose floor it beats is proven without building its fragments —
    // what keeps a fixed global batch of many micro-batches per rank (capacity --global-batch-tokens) to seconds.
    // Ties keep the settings' enumeration order (stable sort), so the same inputs give the same plan.
    std::vector<std::pair<double, KnobSetting>> ordered;
    for (const KnobSetting& knobs : knob_settings(cluster_, training_, offload, options_.pins)) {
      if (!can_fit(knobs)) {
        ++memory_floor_settings_;  // proven: no plan of it fits
        continue;
      }
      ordered.emplace_back(options_.objective == SearchObjective::time ? compute_floor(knobs) : 0.0, knobs);
    }
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::pair<double, KnobSetting>> proven;
    // Note [Setting waves]: the first setting alone, so that the later waves have an incumbent to prune with.
    for (std::size_t next = 0, wave_size = 1; next < ordered.size(); wave_size = kSettingsPerWave) {
      std::vector<SettingRun> wave;
      for (; next < ordered.size() && wave.size() < wave_size; ++next) {
        const auto& [floor_s, knobs] = ordered[next];
        if (beaten_by_incumbent(floor_s)) {
          ++exact_settings_;  // proven: no plan of it is faster than one already found
          ++beaten_by_floor_settings_;
          continue;
        }
        wave.emplace_back(knobs, Pass::one_ahead, floor_s);
      }
      run_wave(wave);
      for (const SettingRun& run : wave) {
        if (run.finished) proven.emplace_back(run.floor_s, run.knobs);
      }
    }
    // Note [Tightened floor]: after every setting's first search, so the incumbent prunes the most.
    if (options_.objective == SearchObjective::time && options_.tightened_floors) {
      const auto later = std::exchange(tighten_later_, {});
      for (std::size_t next = 0; next < later.size();) {
        std::vector<SettingRun> wave;
        for (; next < later.size() && wave.size() < kSettingsPerWave; ++next) {
          const auto& [knobs, refused_peak_bytes] = later[next];
          if (!beaten_by_incumbent(compute_floor(knobs))) wave.emplace_back(knobs, Pass::tightened, 0.0, refused_peak_bytes);
        }
        run_wave(wave);
      }
    }
    // Note [Prefetch depth]: once every setting's best one-ahead plan is known, the depth searches prune hardest.
    if (options_.objective != SearchObjective::time || !options_.joint_prefetch_depth) return;
    for (std::size_t next = 0; next < proven.size();) {
      std::vector<SettingRun> wave;
      for (; next < proven.size() && wave.size() < kSettingsPerWave; ++next) {
        const auto& [floor_s, knobs] = proven[next];
        // Still proven where the incumbent beats its floor: nothing of it beats the incumbent.
        if (!beaten_by_incumbent(floor_s)) wave.emplace_back(knobs, Pass::depths, floor_s);
      }
      run_wave(wave);
      for (const SettingRun& run : wave) {
        if (run.finished) continue;
        --exact_settings_;
        ++fallback_settings_;
        heuristic_.push_back(run.knobs.label() + " (prefetch depths)");
      }
    }
  }

  // Note [Setting waves]: the wave's runs on up to options_.threads threads. Runs that share windows (the settings of
  // one strategy, micro-batch and offload: cache_for) are one task, in order, as a cache serves one search at a time.
  // Every run starts from the incumbent of the wave's start, and the runs are merged in order after the wave.
  void run_wave(std::vector<SettingRun>& wave) {
    std::vector<std::vector<std::size_t>> tasks;
    std::vector<const std::shared_ptr<FragmentCache>*> task_caches;
    for (std::size_t index = 0; index < wave.size(); ++index) {
      SettingRun& run = wave[index];
      run.best_fit = best_fit_;
      run.cache = &cache_for(run.knobs);
      const auto task = std::find(task_caches.begin(), task_caches.end(), run.cache);
      if (task == task_caches.end()) {
        task_caches.push_back(run.cache);
        tasks.push_back({index});
      } else {
        tasks[static_cast<std::size_t>(task - task_caches.begin())].push_back(index);
      }
    }
    run_indexed(tasks.size(), options_.threads, [&](std::size_t task) {
      for (std::size_t index : tasks[task]) wave[index].finished = search_setting(wave[index]);
    });
    for (SettingRun& run : wave) {
      for (const auto& [candidate, setting] : run.evaluated) record(candidate, setting);
      exact_settings_ += run.exact;
      fallback_settings_ += run.fallback;
      kept_by_refinement_settings_ += run.kept_by_refinement;
      heuristic_.insert(heuristic_.end(), run.heuristic.begin(), run.heuristic.end());
      partitions_only_.insert(partitions_only_.end(), run.partitions_only.begin(), run.partitions_only.end());
      if (run.tighten_later) tighten_later_.emplace_back(run.knobs, *run.tighten_later);
    }
  }

  // One pass over one knob setting (SettingRun); one_ahead and depths: true when the search finished. Reads nothing
  // of the searcher that a wave's runs change: it may run beside the other runs of its wave.
  bool search_setting(SettingRun& run) {
    const KnobSetting& knobs = run.knobs;
    const Pass pass = run.pass;
    const Plan base = plan_for_knobs(model_, cluster_, training_, knobs);
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
      return !fastest_fitting_wrapping(fragments, wrap).gave_up;
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
  void search_tightened_floors(SettingRun& run, WrapFragments& fragments, const WrapSearchOptions& wrap) {
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

  bool found_fit() const { return best_fit_.fits; }
  const PlanCandidate& best() const { return best_fit_; }
  const PlanCandidate& smallest() const { return smallest_; }
  std::size_t evaluated() const { return evaluated_; }
  // Knob settings whose wrapping is the proven fastest fitting one (Note [Wrap search]; by branch and bound where the
  // model is a lower bound; for --objective memory, the fastest at the least peak, Note [Least peak]); and those
  // where that search gave up, answered by tightened-floor searches and the per-cap DPs.
  std::size_t exact_settings() const { return exact_settings_; }
  std::size_t fallback_settings() const { return fallback_settings_; }
  // Of the exact ones, those whose kept-gathered suffix was left to the refinements (the joint search's labels
  // outgrew their budget, on long models): exact over partitions only.
  std::size_t kept_by_refinement_settings() const { return kept_by_refinement_settings_; }
  // Of the exact ones, those proven by their compute floor alone (Note [Compute floor]).
  std::size_t beaten_by_floor_settings() const { return beaten_by_floor_settings_; }
  // Settings no plan of which fits: their states and activations floor exceeds the cap (can_fit).
  std::size_t memory_floor_settings() const { return memory_floor_settings_; }
  const std::vector<std::string>& heuristic_settings() const { return heuristic_; }
  // Note [Refining unproven settings]: the best fitting plan of each setting whose search was not proven (heuristic
  // or partitions only), within `window` (a fraction) of the best plan's step.
  std::vector<PlanCandidate> unproven_near_best(double window) const {
    std::vector<PlanCandidate> near;
    if (!best_fit_.fits) return near;
    std::vector<std::string> labels = partitions_only_;
    for (std::string label : heuristic_) {
      if (const auto suffix = label.find(" (prefetch depths)"); suffix != std::string::npos) label.erase(suffix);
      labels.push_back(label);
    }
    std::sort(labels.begin(), labels.end());
    labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
    for (const std::string& label : labels) {
      const auto found = setting_best_.find(label);
      if (found == setting_best_.end() || found->second.knobs == best_fit_.knobs) continue;
      if (found->second.summary.step_time_s <= best_fit_.summary.step_time_s * (1.0 + window)) {
        near.push_back(found->second);
      }
    }
    return near;
  }
  const std::vector<std::string>& partitions_only_settings() const { return partitions_only_; }

 private:
  // The windows lowered for one strategy, micro-batch and offload serve every checkpointing pattern and both passes
  // (Note [Wrap fragments]): one cache per such setting, kept while the search runs.
  std::shared_ptr<FragmentCache>& cache_for(const KnobSetting& knobs) {
    KnobSetting without_checkpointing = knobs;
    without_checkpointing.ac.clear();
    return caches_[without_checkpointing.label()];
  }

  PlanCandidate simulated(const Plan& plan, const std::string& knobs) const {
    PlanCandidate candidate;
    candidate.plan = plan;
    candidate.knobs = knobs;
    candidate.summary = analyze_step(model_, cluster_, profile_, plan, false).simulation.summary;
    // Note [Host memory]: an offloading plan fits only when a node can also hold its offloaded states.
    candidate.fits = fits_in_memory(candidate.summary, cap_) &&
                     (!plan.offload.params && !plan.offload.optimizer ? true
                                                                      : host_memory_use(plan, model_, cluster_).fits());
    return candidate;
  }

  // A plan of a setting's search, simulated: kept in its run (merged by run_wave), and its best so far.
  PlanCandidate evaluate_in(SettingRun& run, const Plan& plan, const std::string& knobs, const std::string& setting) {
    PlanCandidate candidate = simulated(plan, knobs);
    if (better_fit(candidate, run.best_fit)) run.best_fit = candidate;
    run.evaluated.emplace_back(candidate, setting);
    return candidate;
  }

  // Counts a simulated plan and keeps it where it is the best or the smallest so far. `setting`: the knob setting's
  // label where the plan is one of its wrappings (Note [Refining unproven settings]).
  void record(const PlanCandidate& candidate, const std::string& setting) {
    ++evaluated_;
    if (smallest_.summary.op_count == 0 ||
        candidate.summary.peak_memory_bytes < smallest_.summary.peak_memory_bytes) {
      smallest_ = candidate;
    }
    if (better_fit(candidate, best_fit_)) best_fit_ = candidate;
    if (candidate.fits && !setting.empty()) {
      PlanCandidate& best = setting_best_[setting];
      if (!best.fits || candidate.summary.step_time_s < best.summary.step_time_s) best = candidate;
    }
  }

  // A fitting candidate better than `best` by the objective's order (time, then peak; or peak, then time).
  bool better_fit(const PlanCandidate& candidate, const PlanCandidate& best) const {
    if (!candidate.fits) return false;
    const bool by_time = options_.objective == SearchObjective::time;
    const auto key = [&](const PlanCandidate& c) {
      return by_time ? std::make_pair(c.summary.step_time_s, static_cast<double>(c.summary.peak_memory_bytes))
                     : std::make_pair(static_cast<double>(c.summary.peak_memory_bytes), c.summary.step_time_s);
    };
    return !best.fits || key(candidate) < key(best);
  }

  const ModelSpec& model_;
  const Cluster& cluster_;
  const HardwareProfile& profile_;
  const TrainingConfig& training_;
  const SearchOptions& options_;
  std::int64_t cap_;
  PlanCandidate best_fit_, smallest_;
  std::size_t evaluated_ = 0;
  std::size_t exact_settings_ = 0, fallback_settings_ = 0, kept_by_refinement_settings_ = 0;
  std::size_t beaten_by_floor_settings_ = 0, memory_floor_settings_ = 0;
  std::vector<std::string> heuristic_;  // the fallback settings' labels, in search order
  std::vector<std::string> partitions_only_;  // the kept-by-refinement settings' labels
  std::map<std::string, std::shared_ptr<FragmentCache>> caches_;
  std::map<std::string, SettingFloors> floors_;  // by the setting's label without its strategy
  std::map<std::string, PlanCandidate> setting_best_;  // by setting label: its fastest fitting wrapping evaluated
  // Settings for the tightened-floor pass, with the refused wrapping's peak (Note [Tightened floor]).
  std::vector<std::pair<KnobSetting, std::int64_t>> tighten_later_;
};

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
    // (full_shard, full AC, micro-batch 1) is among those the diagnosis compares.
    KnobSetting lean{ShardingStrategy{}, "full", 1, false};
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
