// A plan search's result for the user: its JSON document, the line saying which knob settings were proven and how
// far from the fastest the answer may be, and the setting counts added up over the degrees searched.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "plan_json.h"
#include "search.h"

namespace shardplan {

namespace {

// Note [Unproven bound]: how much faster than the answer the fastest plan of the searched settings may be, as a
// fraction of the answer's step; 0 where the unproven settings' floors are at or above it.
double proven_within_fraction(const SearchResult& result) {
  const double step_s = result.best.summary.step_time_s;
  return step_s > 0 ? std::max(0.0, 1.0 - result.unproven_floor_s / step_s) : 0.0;
}

}  // namespace

void add_setting_counts(SearchResult& into, const SearchResult& from,
                        const std::function<std::string(const std::string&)>& relabel) {
  into.exact_settings += from.exact_settings;
  into.fallback_settings += from.fallback_settings;
  into.kept_by_refinement_settings += from.kept_by_refinement_settings;
  into.floor_settings += from.floor_settings;
  into.memory_floor_settings += from.memory_floor_settings;
  for (const std::string& label : from.heuristic_settings) into.heuristic_settings.push_back(relabel(label));
  for (const std::string& label : from.partitions_only_settings) {
    into.partitions_only_settings.push_back(relabel(label));
  }
  if (from.unproven_floor_s < into.unproven_floor_s) {
    into.unproven_floor_s = from.unproven_floor_s;
    into.unproven_floor_setting = relabel(from.unproven_floor_setting);
  }
}

void set_setting_counts(SearchResult& into, const SearchResult& from) {
  into.exact_settings = from.exact_settings;
  into.fallback_settings = from.fallback_settings;
  into.kept_by_refinement_settings = from.kept_by_refinement_settings;
  into.floor_settings = from.floor_settings;
  into.memory_floor_settings = from.memory_floor_settings;
  into.heuristic_settings = from.heuristic_settings;
  into.partitions_only_settings = from.partitions_only_settings;
  into.unproven_floor_s = from.unproven_floor_s;
  into.unproven_floor_setting = from.unproven_floor_setting;
}

nlohmann::json to_json(const SearchResult& result, const ModelSpec& model) {
  nlohmann::json baselines = nlohmann::json::array();
  for (const auto& baseline : result.baselines) {
    nlohmann::json entry = {{"name", baseline.name},
                            {"step_time_s", baseline.candidate.summary.step_time_s},
                            {"peak_memory_bytes", baseline.candidate.summary.peak_memory_bytes},
                            {"tokens_per_step", baseline.candidate.summary.tokens_per_step},
                            {"tokens_per_s", baseline.candidate.summary.tokens_per_s},
                            {"fits", baseline.candidate.fits}};
    if (result.feasible) {
      // In tokens/s (Note [Equal global batch] in search_2d.cpp: every plan runs the same global batch).
      entry["planned_speedup"] = result.best.summary.tokens_per_s / baseline.candidate.summary.tokens_per_s;
      entry["planned_memory_ratio"] = static_cast<double>(result.best.summary.peak_memory_bytes) /
                                      static_cast<double>(baseline.candidate.summary.peak_memory_bytes);
    }
    baselines.push_back(std::move(entry));
  }
  nlohmann::json document = {{"schema", "shardplan.planning/v1"},
                             {"feasible", result.feasible},
                             {"memory_cap_bytes", result.memory_cap_bytes},
                             {"memory_headroom_bytes", result.memory_headroom_bytes},
                             {"memory_headroom_fraction", result.memory_headroom_fraction},
                             {"usable_memory_bytes", result.usable_memory_bytes()},
                             {"baselines", std::move(baselines)},
                             {"search",
                              {{"candidates_evaluated", result.candidates_evaluated},
                               {"seconds", result.seconds},
                               {"knob_settings_exact", result.exact_settings},
                               {"knob_settings_fallback", result.fallback_settings},
                               {"knob_settings_exact_partitions_only", result.kept_by_refinement_settings},
                               {"knob_settings_proven_by_compute_floor", result.floor_settings},
                               {"knob_settings_over_memory_floor", result.memory_floor_settings},
                               {"knob_settings_heuristic", result.heuristic_settings},
                               {"knob_settings_partitions_only", result.partitions_only_settings},
                               {"unproven_step_floor_s", nullptr},
                               {"proven_within_fraction", nullptr}}}};
  // Note [Unproven bound]: null where every setting is proven (and for --objective memory); the answer's distance
  // from the fastest plan of the searched settings at most, 0 where the unproven floors are above it.
  if (std::isfinite(result.unproven_floor_s)) {
    document["search"]["unproven_step_floor_s"] = result.unproven_floor_s;
    document["search"]["unproven_floor_setting"] = result.unproven_floor_setting;
    if (result.feasible) document["search"]["proven_within_fraction"] = proven_within_fraction(result);
  } else if (result.feasible && result.heuristic_settings.empty() && result.partitions_only_settings.empty()) {
    document["search"]["proven_within_fraction"] = 0.0;
  }
  if (!result.baselines_refused.empty()) document["baselines_refused"] = result.baselines_refused;
  if (result.feasible) {
    document["plan"] = to_json(result.best.plan, model);
    document["predicted"] = to_json(result.best.summary);
    document["knobs"] = result.best.knobs;
    document["host_memory"] = to_json(result.host_memory);
  } else {
    document["diagnosis"] = {{"dominant_term", result.diagnosis.dominant_term},
                             {"smallest_peak_bytes", result.diagnosis.smallest_peak_bytes},
                             {"suggestions", result.diagnosis.suggestions}};
    if (result.diagnosis.host_memory_limited) document["diagnosis"]["host_memory"] = to_json(result.diagnosis.host_memory);
  }
  return document;
}

std::string render_search_proof(const SearchResult& result) {
  // Note [Wrap search]: proven settings are exact for the cost model; heuristic ones had their wrap search give up
  // and are answered by tightened-floor searches (Note [Tightened floor]), the per-cap DPs and the refinements, so a
  // faster plan of theirs may exist.
  char line[320];
  std::snprintf(line, sizeof line,
                "wrapping: proven fastest fitting for %zu knob settings (%zu by their compute floor alone, %zu over "
                "partitions only, the kept units by refinement); heuristic for %zu",
                result.exact_settings, result.floor_settings, result.kept_by_refinement_settings,
                result.heuristic_settings.size());
  std::string text = line;
  // "(prefetch depths)": the one-ahead search finished, the search over prefetch depths gave up (the refinements
  // tried depths 0 and 2 on the best plan only).
  if (!result.heuristic_settings.empty()) {
    text += " (their wrap search gave up: answered by tightened-floor searches, the per-cap DPs and the refinements; "
            "a faster plan may exist)";
  }
  if (result.memory_floor_settings > 0) {
    text += "; skipped " + std::to_string(result.memory_floor_settings) +
            " that cannot fit (their model states and one micro-batch's activations alone exceed the cap)";
  }
  for (const std::string& label : result.partitions_only_settings) {
    text += "\n  partitions only (kept units by refinement): " + label;
  }
  for (const std::string& label : result.heuristic_settings) text += "\n  heuristic: " + label;
  // Note [Unproven bound].
  if (result.feasible && std::isfinite(result.unproven_floor_s)) {
    const double step_s = result.best.summary.step_time_s;
    std::snprintf(line, sizeof line, "\n  bound: no plan of the settings not proven is faster than %.4f s (the least "
                  "step floor of them, ", result.unproven_floor_s);
    text += line + result.unproven_floor_setting + ")";
    if (result.unproven_floor_s >= step_s) {
      std::snprintf(line, sizeof line, ", not faster than the best found, %.4f s: that is the fastest of the searched "
                    "knob settings", step_s);
    } else {
      std::snprintf(line, sizeof line, ": the fastest plan of the searched knob settings is at most %.1f %% faster "
                    "than the best found, %.4f s", 100.0 * proven_within_fraction(result), step_s);
    }
    text += line;
  }
  return text + "\n";
}

}  // namespace shardplan
