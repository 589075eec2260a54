// The FSDP plan search over expert-parallel degrees: one degree's search, or the degrees' searches stage by stage with
// one incumbent (degree_search.h; knob settings: knob_settings.cpp; the Searcher: searcher.h; baselines: baselines.cpp).
#include "search.h"

#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "degree_search.h"

namespace shardplan {
namespace {

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
    SearchResult result = search_internal::search_one_degree(model, cluster, profile, with_degree, options);
    if (result.feasible && with_degree.expert_parallel_degree > 1) {
      result.best.knobs += ", expert parallel " + std::to_string(with_degree.expert_parallel_degree);
    }
    return result;
  }
  // Note [Expert parallelism] (unit_layout.h): each degree is its own search (it changes every MoE unit's gathers,
  // reductions and all-to-alls), the degrees run stage by stage with one incumbent (Note [Shared incumbent] in
  // degree_search.h); the best fitting plan of them all wins, its knobs naming the degree.
  std::vector<TrainingConfig> trainings;
  for (const int degree : options.expert_parallel_degrees) {
    trainings.push_back(training);
    trainings.back().expert_parallel_degree = degree;
  }
  std::vector<search_internal::DegreeInput> inputs;
  for (const TrainingConfig& with_degree : trainings) inputs.push_back({model, cluster, with_degree, options});
  std::vector<search_internal::DegreeOutcome> outcomes = search_internal::search_degrees(inputs, profile);
  std::optional<SearchResult> best;
  SearchResult counts;  // every degree's settings (Note [Unproven bound] in search.h)
  std::size_t evaluated = 0;
  double seconds = 0;
  for (std::size_t index = 0; index < outcomes.size(); ++index) {
    search_internal::DegreeOutcome& outcome = outcomes[index];
    if (outcome.failure) std::rethrow_exception(outcome.failure);  // the first in search order
    SearchResult& result = *outcome.result;
    evaluated += result.candidates_evaluated;
    seconds += result.seconds;
    const int degree = trainings[index].expert_parallel_degree;
    add_setting_counts(counts, result, [&](const std::string& label) {
      return label + ", expert parallel " + std::to_string(degree);
    });
    // The best may be a baseline, which runs FSDP alone.
    if (result.feasible) {
      result.best.knobs += ", expert parallel " + std::to_string(result.best.plan.training.expert_parallel_degree);
    }
    if (!best || better_search(result, *best, options.objective)) best = std::move(result);
  }
  best->candidates_evaluated = evaluated;
  set_setting_counts(*best, counts);
  best->seconds = seconds;
  return std::move(*best);
}

}  // namespace shardplan
