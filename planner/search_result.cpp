// A plan search's result for the user: its JSON document and the line saying which knob settings were proven.
#include <cstdio>

#include "plan_json.h"
#include "search.h"

namespace shardplan {

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
                               {"knob_settings_partitions_only", result.partitions_only_settings}}}};
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
  return text + "\n";
}

}  // namespace shardplan
