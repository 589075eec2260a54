// Searcher (searcher.h): candidates simulated and kept, the settings' floors, and the passes over the knob settings in
// waves on the search's threads (Note [Setting waves]).
#include "searcher.h"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <limits>
#include <utility>

#include "context_parallel_lowering.h"
#include "errors.h"
#include "indexed_pool.h"
#include "memory_headroom.h"
#include "setting_floor_cache.h"
#include "step_analysis.h"
#include "unit_layout.h"

namespace shardplan::search_internal {

namespace {

// Note [Setting waves]: the knob settings of a pass are searched in waves of this many, on the search's threads
// (SearchOptions::threads): every search of a wave prunes with the best plan found before the wave (and with its own
// plans), and the wave's results are merged in setting order. The waves do not depend on the thread count, so
// neither does the result (a test says so); a wave's later settings miss what its earlier ones find, so they prune a
// little less than one at a time would — which this fixed width bounds. The one-ahead pass starts with a wave of one
// setting (the smallest step floor), whose answer the others prune with. Width 4, measured on the 2-core reference
// machine (2026-12-05): a capacity sweep, whose points each search on one thread, spends 10.1 / 10.5 / 11.9 CPU s at
// widths 1 / 4 / 8 (llama2-7b, 4M-token batch, 8..512 GPUs), while `plan` for llama3-70b on 2048 H100s takes about
// 1.9 s wall at 4 or 8 on two threads against 2.1 s at 2.
constexpr std::size_t kSettingsPerWave = 4;

}  // namespace

// A plan simulated and counted (baselines, refinements, the diagnosis's lean plans).
PlanCandidate Searcher::evaluate(const Plan& plan, const std::string& knobs) {
  PlanCandidate candidate = simulated(plan, knobs);
  record(candidate, {});
  return candidate;
}

// Note [Parallel evaluations]: `simulated` reads nothing the evaluations change (it is const), and `record` keeps the
// first of equal candidates, so simulating them all first and recording them in order leaves the searcher as a loop
// of `evaluate` would. The refinements of a 126-block plan are ~16 whole-step simulations each.
std::vector<PlanCandidate> Searcher::evaluate_all(const std::vector<std::pair<Plan, std::string>>& plans) {
  std::vector<PlanCandidate> candidates(plans.size());
  run_indexed(plans.size(), options_.threads, [&](std::size_t index) {
    candidates[index] = simulated(plans[index].first, plans[index].second);
  });
  for (const PlanCandidate& candidate : candidates) record(candidate, {});
  return candidates;
}

// Whether any plan of `knobs` can fit. A lower bound of its peak: the model states of the whole model as one flat
// parameter (padded once, so no wrapping's shards are smaller: Σ ceil(Ψ_i / g) >= ceil(Ψ / g)), by the lowering's own
// per-unit sizes and persistent memory, plus the overhead, plus the activations one micro-batch's passes hold at
// once (Note [Activation floor]). When that exceeds the cap, no wrapping can help, so the setting is skipped (sound
// pruning). Offloading, the same floor of the host memory a node needs (Note [Host memory]) skips settings whose
// states no node here could hold.
bool Searcher::can_fit(const KnobSetting& knobs) {
  if (knobs.offload && cluster_.host_memory_bytes_per_node > 0 &&
      host_memory_floor_per_node(knobs.strategy, {true, false}, model_, training_, cluster_) >
          cluster_.host_memory_bytes_per_node) {
    return false;
  }
  const std::int64_t bytes = states_floor_bytes(knobs);
  // The states alone first: where they exceed the cap, the activation floor's lowering is not needed.
  return bytes <= cap_ && bytes + floors(knobs).activation_peak_bytes <= cap_;
}

std::int64_t Searcher::states_floor_bytes(const KnobSetting& knobs) const {
  return shardplan::states_floor_bytes(model_, cluster_, profile_, training_, knobs);
}

// Note [Compute floor] and Note [Activation floor]; one lowering per checkpointing pattern, micro-batch and offload
// (the kernels and activations do not depend on the sharding strategy, which changes collectives and shards only).
// Note [Context-parallel floors]: on a CP rank's share, the CP rank's program's, its ring included.
const SettingFloors& Searcher::floors(const KnobSetting& knobs) {
  KnobSetting kernels_key = knobs;
  kernels_key.strategy = ShardingStrategy{};
  const auto [known, inserted] = floors_.try_emplace(kernels_key.label());
  if (inserted) {
    // A view that cannot lower the ring throws here, as its CP plans would in the simulator: the degree refuses it.
    known->second = cached_setting_floors(options_.floor_cache.get(), model_, cluster_, profile_, training_, knobs,
                                          options_.context_parallel_degree);
  }
  return known->second;
}

const Searcher::StepFloors& Searcher::step_floors(const KnobSetting& knobs) {
  const auto [known, inserted] = step_floors_.try_emplace(knobs.label());
  if (inserted) {
    const CommunicationFloor& communication = communication_floor_of(knobs);
    // Note [Regather floor]: what a fitting plan's kept units can hold where backward starts.
    const SettingFloors& setting = floors(knobs);
    const std::int64_t keepable_bytes = cap_ - states_floor_bytes(knobs) - setting.turnaround_activation_bytes;
    known->second.order_s =
        step_floor_s(setting, busiest_stream_floor_s(communication, setting, keepable_bytes, profile_),
                     communication.optimizer_step_s, least_overlap_compute_slowdown(profile_));
    known->second.prune_s = setting_step_floor_s(setting, communication, keepable_bytes, profile_);
  }
  return known->second;
}

const CommunicationFloor& Searcher::communication_floor_of(const KnobSetting& knobs) {
  // Note [Communication floor]: its collectives depend on the strategy, offload and micro-batch only.
  KnobSetting collectives_key = knobs;
  collectives_key.ac = "none";
  collectives_key.ac_given = false;
  auto [communication, first] = communication_floors_.try_emplace(collectives_key.label());
  if (first) communication->second = communication_floor(model_, cluster_, profile_, training_, knobs);
  return communication->second;
}

SettingOrder Searcher::one_ahead_order(bool offload) {
  // Best first over knob settings (DESIGN.md "One search driver"): settings in nondecreasing step floor, so the
  // incumbent is fast early and every setting whose floor it beats is proven without building its fragments —
  // what keeps a fixed global batch of many micro-batches per rank (capacity --global-batch-tokens) to seconds.
  // Ties keep the settings' enumeration order (stable sort), so the same inputs give the same plan. Note [Order
  // floor]: ordered by one floor, pruned by the other.
  SettingOrder ordered;
  for (const KnobSetting& knobs : knob_settings(cluster_, training_, offload, options_.pins)) {
    if (!can_fit(knobs)) {
      ++memory_floor_settings_;  // proven: no plan of it fits
      continue;
    }
    const bool timed = options_.objective == SearchObjective::time;
    ordered.push_back({timed ? order_floor(knobs) : 0.0, timed ? step_floor(knobs) : 0.0, knobs});
  }
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const OrderedSetting& a, const OrderedSetting& b) { return a.order_s < b.order_s; });
  return ordered;
}

bool Searcher::admits(double floor_s) {
  if (!beaten_by_incumbent(floor_s)) return true;
  ++exact_settings_;  // proven: no plan of it is faster than one already found
  ++beaten_by_floor_settings_;
  return false;
}

void Searcher::run_wrappings(bool offload) {
  if (const std::exception_ptr failure = run_one_ahead_jointly({this}, {one_ahead_order(offload)}).front()) {
    std::rethrow_exception(failure);
  }
  run_tightened_floors();
}

std::vector<std::exception_ptr> run_one_ahead_jointly(const std::vector<Searcher*>& searchers,
                                                      const std::vector<SettingOrder>& orders) {
  std::vector<std::exception_ptr> failures(searchers.size());
  struct Entry {
    OrderedSetting setting;
    std::size_t searcher;
  };
  // One wave of up to `wave_size` admitted settings from `queue` at `next`, run and merged; then every search knows
  // the best plan of all (Note [Joint setting order]).
  const auto run_wave_from = [&](const std::vector<Entry>& queue, std::size_t& next, std::size_t wave_size) {
    std::vector<std::vector<Searcher::SettingRun>> runs(searchers.size());
    for (std::size_t taken = 0; next < queue.size() && taken < wave_size; ++next) {
      const Entry& entry = queue[next];
      if (failures[entry.searcher] || !searchers[entry.searcher]->admits(entry.setting.floor_s)) continue;
      runs[entry.searcher].emplace_back(entry.setting.knobs, Searcher::Pass::one_ahead, entry.setting.floor_s);
      ++taken;
    }
    std::vector<WavePart> parts;
    for (std::size_t index = 0; index < searchers.size(); ++index) {
      if (!runs[index].empty()) parts.push_back({searchers[index], &runs[index]});
    }
    run_wave_parts(parts);
    for (std::size_t index = 0; index < searchers.size(); ++index) {
      for (const Searcher::SettingRun& run : runs[index]) {
        if (run.failure) {
          failures[index] = run.failure;  // the search drops out; its runs were not merged
          break;
        }
        if (run.finished) searchers[index]->proven_.emplace_back(run.floor_s, run.knobs);
      }
    }
    if (searchers.size() < 2 || searchers.front()->options_.objective != SearchObjective::time) return;
    double best_s = std::numeric_limits<double>::infinity();
    for (std::size_t index = 0; index < searchers.size(); ++index) {
      if (!failures[index]) best_s = std::min(best_s, searchers[index]->incumbent_s());
    }
    for (Searcher* searcher : searchers) searcher->know_step_s(best_s);
  };
  // Each search's leading settings, search by search: its first setting alone (Note [Setting waves]: so that the
  // later waves have an incumbent to prune with), then one wave.
  std::vector<Entry> rest;
  for (std::size_t index = 0; index < searchers.size(); ++index) {
    std::vector<Entry> own;
    for (const OrderedSetting& setting : orders.at(index)) own.push_back({setting, index});
    std::size_t next = 0;
    run_wave_from(own, next, 1);
    run_wave_from(own, next, kSettingsPerWave);
    rest.insert(rest.end(), own.begin() + static_cast<std::ptrdiff_t>(next), own.end());
  }
  // Then the rest of every search's settings in one order of step floor; ties keep the searches' order.
  std::stable_sort(rest.begin(), rest.end(),
                   [](const Entry& a, const Entry& b) { return a.setting.order_s < b.setting.order_s; });
  for (std::size_t next = 0; next < rest.size();) run_wave_from(rest, next, kSettingsPerWave);
  return failures;
}

void Searcher::run_tightened_floors() {
  // Note [Tightened floor]: after every setting's first search, so the incumbent prunes the most.
  if (options_.objective != SearchObjective::time || !options_.tightened_floors) return;
  const auto later = std::exchange(tighten_later_, {});
  for (std::size_t next = 0; next < later.size();) {
    std::vector<SettingRun> wave;
    for (; next < later.size() && wave.size() < kSettingsPerWave; ++next) {
      const auto& [knobs, refused_peak_bytes] = later[next];
      if (beaten_by_incumbent(step_floor(knobs))) continue;
      wave.emplace_back(knobs, Pass::tightened, 0.0, refused_peak_bytes);
    }
    run_wave(wave);
  }
}

void Searcher::run_prefetch_depths() {
  // Note [Prefetch depth]: once every setting's best one-ahead plan is known, the depth searches prune hardest.
  const auto proven = std::exchange(proven_, {});
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
      know_unproven(run.floor_s, heuristic_.back());  // Note [Unproven bound]
    }
  }
}

// Note [Setting waves]: the wave's runs on up to options_.threads threads. Runs that share windows (the settings of
// one strategy, micro-batch and offload: cache_for) are one task, in order, as a cache serves one search at a time.
// Every run starts from the incumbent of the wave's start, and the runs are merged in order after the wave.
void Searcher::run_wave(std::vector<SettingRun>& wave) {
  run_wave_parts({{this, &wave}});
  for (const SettingRun& run : wave) {
    if (run.failure) std::rethrow_exception(run.failure);  // the first in setting order, as a sequential loop's
  }
}

void run_wave_parts(const std::vector<WavePart>& parts) {
  if (parts.empty()) return;
  struct Task {
    const WavePart* part;
    const std::shared_ptr<FragmentCache>* cache;
    std::vector<std::size_t> runs;
  };
  std::vector<Task> tasks;
  for (const WavePart& part : parts) {
    Searcher& searcher = *part.searcher;
    for (std::size_t index = 0; index < part.runs->size(); ++index) {
      Searcher::SettingRun& run = (*part.runs)[index];
      run.best_fit = searcher.best_fit_;
      run.cache = &searcher.cache_for(run.knobs);
      const auto task = std::find_if(tasks.begin(), tasks.end(), [&](const Task& t) { return t.cache == run.cache; });
      if (task == tasks.end()) {
        tasks.push_back({&part, run.cache, {index}});
      } else {
        task->runs.push_back(index);
      }
    }
  }
  run_indexed(tasks.size(), parts.front().searcher->options_.threads, [&](std::size_t task_index) {
    const Task& task = tasks[task_index];
    for (std::size_t index : task.runs) {
      Searcher::SettingRun& run = (*task.part->runs)[index];
      try {
        run.finished = task.part->searcher->search_setting(run);
      } catch (...) {
        run.failure = std::current_exception();  // the task's later runs share its cache: not run, as in a loop
        break;
      }
    }
  });
  for (const WavePart& part : parts) {
    const auto failed = [](const Searcher::SettingRun& run) { return run.failure != nullptr; };
    if (std::any_of(part.runs->begin(), part.runs->end(), failed)) continue;  // its caller drops or rethrows
    Searcher& searcher = *part.searcher;
    for (Searcher::SettingRun& run : *part.runs) {
      for (const auto& [candidate, setting] : run.evaluated) searcher.record(candidate, setting);
      searcher.exact_settings_ += run.exact;
      searcher.fallback_settings_ += run.fallback;
      searcher.kept_by_refinement_settings_ += run.kept_by_refinement;
      searcher.heuristic_.insert(searcher.heuristic_.end(), run.heuristic.begin(), run.heuristic.end());
      searcher.partitions_only_.insert(searcher.partitions_only_.end(), run.partitions_only.begin(),
                                       run.partitions_only.end());
      if (run.tighten_later) searcher.tighten_later_.emplace_back(run.knobs, *run.tighten_later);
      // Note [Unproven bound]: a one-ahead search that gave up or proved partitions only; its floor bounds the rest.
      if (searcher.options_.objective == SearchObjective::time && run.pass == Searcher::Pass::one_ahead &&
          (run.fallback > 0 || run.kept_by_refinement > 0)) {
        searcher.know_unproven(run.floor_s, run.knobs.label());
      }
    }
  }
}

// Note [Refining unproven settings]: the best fitting plan of each setting whose search was not proven (heuristic
// or partitions only), within `window` (a fraction) of the best plan's step.
std::vector<PlanCandidate> Searcher::unproven_near_best(double window) const {
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

PlanCandidate Searcher::simulated(const Plan& plan, const std::string& knobs) const {
  PlanCandidate candidate;
  // Note [Fixed context parallel degree]: on a CP rank's share, the CP plan the share's plan stands for (a no-op for
  // the plans built from a setting's template, which already is one).
  candidate.plan = context_parallel_plan_of_share(plan, options_.context_parallel_degree);
  candidate.knobs = knobs;
  candidate.summary = analyze_step(model_, cluster_, profile_, candidate.plan, false).simulation.summary;
  // Note [Host memory]: an offloading plan fits only when a node can also hold its offloaded states (and its
  // offloaded activations, Note [Activation offloading]).
  const bool offloads = plan.offload.params || plan.offload.optimizer || plan.training.activation_offload;
  candidate.fits = fits_in_memory(candidate.summary, cap_) &&
                   (!offloads || host_memory_use(candidate.plan, model_, cluster_).fits());
  return candidate;
}

// A plan of a setting's search, simulated: kept in its run (merged by run_wave), and its best so far.
PlanCandidate Searcher::evaluate_in(SettingRun& run, const Plan& plan, const std::string& knobs,
                                    const std::string& setting) {
  PlanCandidate candidate = simulated(plan, knobs);
  if (better_fit(candidate, run.best_fit)) run.best_fit = candidate;
  run.evaluated.emplace_back(candidate, setting);
  return candidate;
}

// Counts a simulated plan and keeps it where it is the best or the smallest so far. `setting`: the knob setting's
// label where the plan is one of its wrappings (Note [Refining unproven settings]).
void Searcher::record(const PlanCandidate& candidate, const std::string& setting) {
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
bool Searcher::better_fit(const PlanCandidate& candidate, const PlanCandidate& best) const {
  if (!candidate.fits) return false;
  const bool by_time = options_.objective == SearchObjective::time;
  const auto key = [&](const PlanCandidate& c) {
    return by_time ? std::make_pair(c.summary.step_time_s, static_cast<double>(c.summary.peak_memory_bytes))
                   : std::make_pair(static_cast<double>(c.summary.peak_memory_bytes), c.summary.step_time_s);
  };
  return !best.fits || key(candidate) < key(best);
}

}  // namespace shardplan::search_internal
