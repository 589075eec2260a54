// The plan search's Searcher: one degree's knob settings searched in waves (Note [Setting waves]), each setting's wrap
// searches, and what the search keeps — the best and smallest plans, the counts its proof line reports. Internal to
// planner/ (search.cpp drives it; searcher.cpp and searcher_setting.cpp define it).
#pragma once

#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "communication_floor.h"
#include "fragment_cache.h"
#include "search.h"
#include "wrap_dp.h"

namespace shardplan::search_internal {

class Searcher;

// Note [Joint setting order]: the one-ahead pass of several searches (one per tensor- or expert-parallel degree, each
// its own Searcher over its own view of the model) run as one. First each search's leading settings, search by
// search in the given order (the degrees' seed order, Note [Degree order] in search_2d.cpp): its first setting alone,
// then one wave (Note [Setting waves]); then the rest of every search's settings in one nondecreasing order of step
// floor (ties: the searches' order, then each one's), in waves that may mix searches. After every wave the best plan
// of any search prunes them all (Searcher::know_step_s). Run one search after another, the first searched ran with no
// incumbent but its own, and the seed order is not always the answer's: llama3.1-405b on 256x8 H100s searched 40 TP 4
// settings (0.39 of 0.67 CPU s in that pass, floors 39.0-45.7 s, its best 47.2 s) before TP 2's 45.3 s answer could
// prune those above it. The leading settings keep what the seed order got right: ordered by floor alone from the
// start, llama3-70b on 2048 H100s searched TP 4's "AC none" settings (floors 7.18 s, best 8.92 s) before TP 2's first
// ones gave 8.11 s, 40 ms each against 3 ms with that incumbent, and took 1.11 s against 0.95 s. Measured (`plan`,
// wall, 2 threads, before → after): 405B on 2048 H100s 0.90 → 0.70 s; 405B on 256, 70B on 2048 and on 256: the same
// candidates and times. The order and the waves do not depend on the thread count, so neither does the result; for
// one search this is its own one-ahead pass as before (Searcher::run_wrappings).
// `orders`: each search's one_ahead_order, which the caller computes (a search that cannot order its settings throws
// there, alone).
// Each setting with the floor it is ordered by and the floor it is pruned by (Note [Order floor]).
struct OrderedSetting {
  double order_s = 0;
  double floor_s = 0;
  KnobSetting knobs;
};
using SettingOrder = std::vector<OrderedSetting>;
// Per search, what its runs threw first (null: nothing); a search that threw takes no more runs and its runs of that
// wave are not merged.
std::vector<std::exception_ptr> run_one_ahead_jointly(const std::vector<Searcher*>& searchers,
                                                      const std::vector<SettingOrder>& orders);

struct WavePart;
// Note [Setting waves]: one wave's runs, of one search or several, on the first search's threads.
void run_wave_parts(const std::vector<WavePart>& parts);

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
    std::exception_ptr failure;  // what the run threw (then nothing of it is merged)

    SettingRun(const KnobSetting& setting, Pass of_pass, double setting_floor_s, std::int64_t refused_bytes = 0)
        : knobs(setting), pass(of_pass), refused_peak_bytes(refused_bytes), floor_s(setting_floor_s) {}
  };

  Searcher(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile, const TrainingConfig& training,
           const SearchOptions& options, std::int64_t cap)
      : model_(model), cluster_(cluster), profile_(profile), training_(training), options_(options), cap_(cap),
        known_step_s_(options.known_step_s) {}

  // A plan simulated and counted (baselines, refinements, the diagnosis's lean plans).
  PlanCandidate evaluate(const Plan& plan, const std::string& knobs);
  // Note [Parallel evaluations]: plans (with their knobs) simulated on the search's threads, then counted in order —
  // what evaluating them one after another counts, on any thread count.
  std::vector<PlanCandidate> evaluate_all(const std::vector<std::pair<Plan, std::string>>& plans);

  // Whether any plan of `knobs` can fit. A lower bound of its peak: the model states of the whole model as one flat
  // parameter (padded once, so no wrapping's shards are smaller: Σ ceil(Ψ_i / g) >= ceil(Ψ / g)), by the lowering's own
  // per-unit sizes and persistent memory, plus the overhead, plus the activations one micro-batch's passes hold at
  // once (Note [Activation floor]). When that exceeds the cap, no wrapping can help, so the setting is skipped (sound
  // pruning). Offloading, the same floor of the host memory a node needs (Note [Host memory]) skips settings whose
  // states no node here could hold.
  bool can_fit(const KnobSetting& knobs);
  // The states part of that bound: the whole model's persistent memory, padded once, with the overhead.
  std::int64_t states_floor_bytes(const KnobSetting& knobs) const;

  // Note [Compute floor] and Note [Activation floor]; one lowering per checkpointing pattern, micro-batch and offload
  // (the kernels and activations do not depend on the sharding strategy, which changes collectives and shards only).
  const SettingFloors& floors(const KnobSetting& knobs);
  // Note [Step floor] (communication_floor.h): the setting's compute floor with its communication floor, by label.
  double step_floor(const KnobSetting& knobs) { return step_floors(knobs).prune_s; }
  // Note [Order floor]: the settings are ordered by the step floor without Note [Gathers before reductions] and
  // pruned by the whole one. The order decides what the incumbent is when a setting is searched, and so what the
  // settings whose searches give up answer (heuristic and partitions-only ones: Note [Tightened floor]); the summed
  // term reorders settings whose floors it raises (ZeRO-2 ones most: their units are never regathered), and measured
  // ordered by it, the demo's capacity sweep answered 22.970 s for llama3-70b on 1024 A100-80GBs where it answered
  // 22.956 s before (its settings there are heuristic), with no time saved (llama3-70b on 2048 H100s, `--jobs 1`:
  // 0.99 s user against 0.97 s ordered as before). Pruned by it, that plan takes 1.06 -> 0.97 s user, every output
  // as before.
  double order_floor(const KnobSetting& knobs) { return step_floors(knobs).order_s; }

  // True when no plan of a setting whose step floor is `floor_s` can beat the best fitting plan so far (by time;
  // an equal time could still win on peak, so only a strictly larger floor skips).
  bool beaten_by_incumbent(double floor_s) const {
    return options_.objective == SearchObjective::time && floor_s > incumbent_s();
  }
  // The step time to beat: the best fitting plan so far, or one known from another search (SearchOptions::known_step_s).
  double incumbent_s() const { return incumbent_s(best_fit_); }
  double incumbent_s(const SettingRun& run) const { return incumbent_s(run.best_fit); }
  double incumbent_s(const PlanCandidate& best_fit) const {
    return std::min(known_step_s_, best_fit.fits ? best_fit.summary.step_time_s
                                                 : std::numeric_limits<double>::infinity());
  }
  // Note [Shared incumbent] (degree_search.h): a plan this fast is known from another degree's search since this one
  // began; only faster plans are wanted from here on (never raised above SearchOptions::known_step_s).
  void know_step_s(double step_s) { known_step_s_ = std::min(known_step_s_, step_s); }
  double known_step_s() const { return known_step_s_; }

  // The passes over the knob settings of `offload`: the one-ahead wrap searches and the tightened-floor searches,
  // then (run_prefetch_depths) the prefetch-depth searches of the settings those proved. run does both.
  void run(bool offload) {
    run_wrappings(offload);
    run_prefetch_depths();
  }
  void run_wrappings(bool offload);
  // The one-ahead pass's settings of `offload` that can fit, in nondecreasing step floor (ties: enumeration order);
  // those that cannot are counted proven here.
  SettingOrder one_ahead_order(bool offload);
  // The tightened-floor pass (Note [Tightened floor]) of the settings the one-ahead pass left to it.
  void run_tightened_floors();
  void run_prefetch_depths();

  // Note [Setting waves]: the wave's runs on up to options_.threads threads. Runs that share windows (the settings of
  // one strategy, micro-batch and offload: cache_for) are one task, in order, as a cache serves one search at a time.
  // Every run starts from the incumbent of the wave's start, and the runs are merged in order after the wave.
  void run_wave(std::vector<SettingRun>& wave);

  // One pass over one knob setting (SettingRun); one_ahead and depths: true when the search finished. Reads nothing
  // of the searcher that a wave's runs change: it may run beside the other runs of its wave.
  bool search_setting(SettingRun& run);

  // Note [Tightened floor]: the search again under floor caps lowered by the first wrapping's overshoot of the cap
  // (its floor was within the cap, its simulated peak `first_peak_bytes` above it; 1 % where none was refused),
  // then twice that, ... until one answers — finishes or simulates a wrapping that fits, with the kept-gathered
  // choice kept — then bisected between the last that did not and it. `check` still reads the real cap in `wrap`.
  // A tightened search whose label DP outgrew its budget without the kept choice ends the ladder (one that outgrew
  // it with the choice does not search without it: a tighter floor may bring the choice back).
  void search_tightened_floors(SettingRun& run, WrapFragments& fragments, const WrapSearchOptions& wrap);

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
  // Of the exact ones, those proven by their step floor alone (Note [Step floor] in communication_floor.h).
  std::size_t beaten_by_floor_settings() const { return beaten_by_floor_settings_; }
  // Settings no plan of which fits: their states and activations floor exceeds the cap (can_fit).
  std::size_t memory_floor_settings() const { return memory_floor_settings_; }
  const std::vector<std::string>& heuristic_settings() const { return heuristic_; }
  // Note [Refining unproven settings]: the best fitting plan of each setting whose search was not proven (heuristic
  // or partitions only), within `window` (a fraction) of the best plan's step.
  std::vector<PlanCandidate> unproven_near_best(double window) const;
  const std::vector<std::string>& partitions_only_settings() const { return partitions_only_; }
  // Note [Unproven bound] (search.h): the least step floor of the settings not proven (heuristic ones, those proven
  // over partitions only, those whose prefetch-depth search gave up); infinity where every setting is proven, and
  // for --objective memory (its settings carry no step floor).
  double unproven_floor_s() const { return unproven_floor_s_; }
  // The setting whose floor that is (the first of equal ones), labelled as the output lists it.
  const std::string& unproven_floor_setting() const { return unproven_floor_setting_; }

 private:
  friend std::vector<std::exception_ptr> run_one_ahead_jointly(const std::vector<Searcher*>& searchers,
                                                               const std::vector<SettingOrder>& orders);
  friend void run_wave_parts(const std::vector<WavePart>& parts);
  // False, counting the setting proven, when the incumbent beats its step floor `floor_s`.
  bool admits(double floor_s);
  // Note [Communication floor]: by strategy, offload and micro-batch.
  const CommunicationFloor& communication_floor_of(const KnobSetting& knobs);

  // The windows lowered for one strategy, micro-batch and offload serve every checkpointing pattern and both passes
  // (Note [Wrap fragments]): one cache per such setting, kept while the search runs.
  std::shared_ptr<FragmentCache>& cache_for(const KnobSetting& knobs) {
    KnobSetting without_checkpointing = knobs;
    without_checkpointing.ac.clear();
    return caches_[without_checkpointing.label()];
  }

  PlanCandidate simulated(const Plan& plan, const std::string& knobs) const;

  // A plan of a setting's search, simulated: kept in its run (merged by run_wave), and its best so far.
  PlanCandidate evaluate_in(SettingRun& run, const Plan& plan, const std::string& knobs, const std::string& setting);

  // Counts a simulated plan and keeps it where it is the best or the smallest so far. `setting`: the knob setting's
  // label where the plan is one of its wrappings (Note [Refining unproven settings]).
  void record(const PlanCandidate& candidate, const std::string& setting);

  // A fitting candidate better than `best` by the objective's order (time, then peak; or peak, then time).
  bool better_fit(const PlanCandidate& candidate, const PlanCandidate& best) const;

  const ModelSpec& model_;
  const Cluster& cluster_;
  const HardwareProfile& profile_;
  const TrainingConfig& training_;
  const SearchOptions& options_;
  std::int64_t cap_;
  double known_step_s_;  // SearchOptions::known_step_s, lowered by know_step_s
  PlanCandidate best_fit_, smallest_;
  // The settings run_wrappings proved (their one-ahead search finished), with their step floors, in search order:
  // what run_prefetch_depths searches (Note [Prefetch depth]).
  std::vector<std::pair<double, KnobSetting>> proven_;
  std::size_t evaluated_ = 0;
  std::size_t exact_settings_ = 0, fallback_settings_ = 0, kept_by_refinement_settings_ = 0;
  std::size_t beaten_by_floor_settings_ = 0, memory_floor_settings_ = 0;
  std::vector<std::string> heuristic_;  // the fallback settings' labels, in search order
  std::vector<std::string> partitions_only_;  // the kept-by-refinement settings' labels
  double unproven_floor_s_ = std::numeric_limits<double>::infinity();  // unproven_floor_s
  std::string unproven_floor_setting_;
  // Note [Unproven bound]: a setting not proven, with its step floor and its label in the output.
  void know_unproven(double floor_s, const std::string& label) {
    if (floor_s >= unproven_floor_s_) return;
    unproven_floor_s_ = floor_s;
    unproven_floor_setting_ = label;
  }
  std::map<std::string, std::shared_ptr<FragmentCache>> caches_;
  std::map<std::string, SettingFloors> floors_;  // by the setting's label without its strategy
  struct StepFloors {
    double order_s = 0, prune_s = 0;  // Note [Order floor]
  };
  const StepFloors& step_floors(const KnobSetting& knobs);
  std::map<std::string, StepFloors> step_floors_;  // by the setting's label
  std::map<std::string, CommunicationFloor> communication_floors_;  // by strategy, offload, micro-batch (step_floor)
  std::map<std::string, PlanCandidate> setting_best_;  // by setting label: its fastest fitting wrapping evaluated
  // Settings for the tightened-floor pass, with the refused wrapping's peak (Note [Tightened floor]).
  std::vector<std::pair<KnobSetting, std::int64_t>> tighten_later_;
};

// A wave's runs of one search, merged into it in order after the wave.
struct WavePart {
  Searcher* searcher;
  std::vector<Searcher::SettingRun>* runs;
};

}  // namespace shardplan::search_internal
