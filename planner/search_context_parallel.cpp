// The search over context parallelism (search_context_parallel.h): one CP rank's search, the degree restored, the
// degree search.
#include "search_context_parallel.h"

#include <algorithm>
#include <cstdint>

#include "context_parallel_lowering.h"
#include "errors.h"
#include "memory_headroom.h"
#include "step_analysis.h"

namespace shardplan {

namespace {

// Note [Fixed context parallel degree] (planner/context_parallel_lowering.h): `plan --context-parallel N` keeps
// cp = N. The search enumerates its knob settings on one CP rank's share of every sequence (seq / cp tokens, the
// batch counted in shares: micro-batches, accumulation and the floors' micro-batch are the CP rank's), but every plan
// it builds is the CP plan the share's plan stands for (context_parallel_plan_of_share: the degree and the whole
// sequence back): each setting's template (Searcher::search_setting), so its wrap fragments are lowered from the CP
// rank's program — the ring's attention steps, its sends on the p2p stream and their buffers included, the
// fragments' step the simulator's (a test checks every partition) — and every plan simulated (Searcher::simulated).
// So each step, peak and fit the search compares, its incumbent included, is the CP plan's, and the wrap search is
// as exact as for any plan. Before, the share's plans were searched without the ring and only the best was given it
// afterwards: llama3.1-8b at 131,072 tokens on 16 H100s with `--context-parallel 4` planned TP 4, hybrid_shard:2, AC
// 25 % at 21.29 s (share step 6.80 s), where `--ac full` gave TP 2, hybrid_shard_zero2:4 at 20.42 s — the share's
// best plans all tripled with the ring, and AC full's share floor was above the share's incumbent; it now plans TP 2,
// full_shard, AC 75 % at 19.23 s.

// The baselines, which run on the share too, given the degree back (Note [Fixed context parallel degree]); the best
// plan already is a CP plan, only its description gains the degree.
void restore_context_parallel(SearchResult& result, int degree, const ModelSpec& model, const Cluster& cluster,
                              const HardwareProfile& profile) {
  const std::string prefix = "CP " + std::to_string(degree) + ", ";
  if (result.feasible) result.best.knobs = prefix + result.best.knobs;
  for (std::string& label : result.heuristic_settings) label = prefix + label;
  for (std::string& label : result.partitions_only_settings) label = prefix + label;
  if (!result.unproven_floor_setting.empty()) result.unproven_floor_setting = prefix + result.unproven_floor_setting;
  for (BaselineResult& baseline : result.baselines) {
    PlanCandidate& candidate = baseline.candidate;
    try {
      candidate.plan = context_parallel_plan_of_share(candidate.plan, degree);
      candidate.summary = analyze_step(model, cluster, profile, candidate.plan, false).simulation.summary;
      candidate.fits = fits_in_memory(candidate.summary, result.usable_memory_bytes());
    } catch (const InputError&) {
      candidate.fits = false;  // a baseline the CP plan cannot take (e.g. DDP's world): not comparable
    }
  }
}

SearchResult search_at_degree(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                              const TrainingConfig& training, SearchOptions options, int degree) {
  std::erase_if(options.tensor_parallel_degrees,
                [&](int tp) { return cluster.world_size() % (tp * degree) != 0; });
  if (options.tensor_parallel_degrees.empty()) options.tensor_parallel_degrees = {1};
  options.context_parallel_degree = degree;  // Note [Context-parallel floors]
  SearchResult result =
      search_plans(model, cluster, profile, context_parallel_share_training(training, degree), options);
  restore_context_parallel(result, degree, model, cluster, profile);
  return result;
}

// Note [Context-parallel search]: at a fixed global batch every cp gives each GPU the same tokens (cp ranks share a
// sequence, and there are cp times fewer data-parallel ranks), so the same kernels and activations per GPU, plus the
// ring's exchanges. CP pays off only where one sequence's activations are what stands in the way: the best plan
// without it runs one sequence per micro-batch and still checkpoints activations, or nothing fits. There, cp 2, 4
// and 8 (dividing the world, the sequence in 2·cp chunks as torch's load balancer needs, the model one CP lowers) are
// searched, each pruned by the best plan so far (SearchOptions::known_step_s); elsewhere cp stays 1 and the line says
// why. A bound on the work, not a proof: only sequences of at least kLeastContextParallelTokens, each CP rank keeping
// at least kLeastTokensPerContextRank of them — torchtitan's CP runs start at 32k tokens (Table 2 of its Llama 3
// report: 32,768 to 262,144 tokens; its 8k recipes run without CP), and below these a search at cp 8 simulates 8
// micro-batches per step for every setting, which took `plan` for llama3.1-405b on 2048 H100s from 0.5 s to 30 s.
constexpr std::int64_t kLeastContextParallelTokens = 16384;
constexpr std::int64_t kLeastTokensPerContextRank = 4096;

// Note [Context-parallel floors]: the search at a degree runs on one CP rank's share, whose own setting floors hold
// one ring step of attention and no ring buffers; against CP plans, which take the ring, they prune little (for
// llama3.1-405b at 32,768 tokens on 512 H100s the share's floors were 154-186 s against a 229 s plan). So the
// search floors each setting as the CP rank's program itself, its ring included (micro_batch_floors with the
// degree, as the pipeline grid floors its CP points; Searcher::floors): it orders the settings, skips those whose
// states and activations with the ring's buffers exceed the cap, and proves away those whose step floor
// (setting_step_floor_s) is above the best CP plan known — another degree's (SearchOptions::known_step_s) or its own
// (every plan it simulates is a CP plan: Note [Fixed context parallel degree]). Every CP plan of a setting takes at
// least its floor, so none it drops could beat or fit. The 405B plan above takes 0.6 s against 1.4 s when the
// share's floors alone pruned, the same plan.

}  // namespace

std::vector<int> context_parallel_candidates(const ModelSpec& model, const Cluster& cluster,
                                             const TrainingConfig& training) {
  std::vector<int> degrees;
  if (training.seq_len < kLeastContextParallelTokens) return degrees;
  // Note [Equal global batch]: the batch every degree runs, in whole sequences.
  TrainingConfig at_batch = training;
  if (at_batch.global_batch == 0) at_batch.global_batch = training.micro_batch * cluster.world_size();
  for (const int degree : {2, 4, 8}) {
    if (cluster.world_size() % degree != 0 || training.seq_len % (2 * degree) != 0) continue;
    if (training.seq_len / degree < kLeastTokensPerContextRank) continue;
    try {
      validate_context_parallel(degree, at_batch, model, "--context-parallel");
      (void)at_batch.grad_accumulation_steps(cluster.world_size() / degree);
    } catch (const InputError&) {
      continue;  // a degree this model or batch cannot take
    }
    degrees.push_back(degree);
  }
  return degrees;
}

namespace {

std::string why_not_searched(const SearchResult& result, const SearchOptions& options, const TrainingConfig& training) {
  if (options.objective != SearchObjective::time) return "--objective memory";
  if (training.seq_len < kLeastContextParallelTokens) {
    return "sequences under " + std::to_string(kLeastContextParallelTokens) +
           " tokens: Note [Context-parallel search] bounds the work there";
  }
  if (!result.feasible) return "";
  const Plan& best = result.best.plan;
  const bool checkpoints =
      std::any_of(best.layer_checkpointing.begin(), best.layer_checkpointing.end(),
                  [](ActivationCheckpointing mode) { return mode != ActivationCheckpointing::none; });
  if (best.training.micro_batch > 1 || !checkpoints) {
    return "the best plan without it runs " + std::to_string(best.training.micro_batch) +
           " sequence(s) per micro-batch" + (checkpoints ? "" : " without checkpointing") +
           ": every cp gives a GPU the same tokens, so the ring could only add time";
  }
  return "";
}

}  // namespace

SearchResult search_with_context_parallel(const ModelSpec& model, const Cluster& cluster,
                                          const HardwareProfile& profile, const TrainingConfig& training,
                                          const SearchOptions& options, int pinned_degree,
                                          ContextParallelOutcome& outcome) {
  if (pinned_degree > 1) {
    outcome = {pinned_degree, true, {}, "", {}, true};
    return search_at_degree(model, cluster, profile, training, options, pinned_degree);
  }
  SearchResult best = search_plans(model, cluster, profile, training, options);
  outcome = {1, pinned_degree == 1, {}, "", {}, true};
  if (pinned_degree == 1) return best;
  outcome.skipped = why_not_searched(best, options, training);
  if (!outcome.skipped.empty()) return best;
  SearchResult counts;  // every degree's settings (Note [Unproven bound] in search.h)
  set_setting_counts(counts, best);
  // Note [Equal global batch]: the batch every degree runs, in whole sequences.
  TrainingConfig at_batch = training;
  if (at_batch.global_batch == 0) at_batch.global_batch = training.micro_batch * cluster.world_size();
  for (const int degree : context_parallel_candidates(model, cluster, training)) {
    SearchOptions degree_options = options;
    if (best.feasible) degree_options.known_step_s = std::min(options.known_step_s, best.best.summary.step_time_s);
    outcome.searched.push_back(degree);
    SearchResult found;
    try {
      found = search_at_degree(model, cluster, profile, at_batch, degree_options, degree);
    } catch (const InputError&) {
      continue;  // e.g. a batch the CP ranks' shares do not divide
    }
    add_setting_counts(counts, found, [](const std::string& label) { return label; });  // labelled "CP N, "
    if (found.feasible && (!best.feasible || found.best.summary.step_time_s < best.best.summary.step_time_s)) {
      best = std::move(found);
      outcome.degree = degree;
    }
  }
  set_setting_counts(best, counts);
  if (outcome.searched.empty()) {
    outcome.skipped = "no cp of 2, 4, 8 divides this world and sequence (in shares of at least " +
                      std::to_string(kLeastTokensPerContextRank) + " tokens) for this model";
  }
  return best;
}

std::string render_context_parallel_line(const ContextParallelOutcome& outcome) {
  const auto listed = [](const std::vector<int>& degrees) {
    std::string text;
    for (const int degree : degrees) text += (text.empty() ? "" : ", ") + std::to_string(degree);
    return text;
  };
  if (outcome.pinned) {
    if (outcome.degree == 1) return "";
    return "context parallel " + std::to_string(outcome.degree) +
           ": fixed by --context-parallel; the knob settings are one CP rank's (seq/cp tokens of each sequence); "
           "every plan is lowered and simulated with its ring\n";
  }
  const std::string pipeline =
      outcome.pipeline_searched.empty()
          ? ""
          : "; pipeline plans: cp " + listed(outcome.pipeline_searched) + " beside cp 1 in their grid";
  const std::string planned = outcome.feasible ? "; planned cp " + std::to_string(outcome.degree) : "; no plan fits";
  if (!outcome.skipped.empty()) return "context parallel: not searched (" + outcome.skipped + ")\n";
  if (outcome.searched.empty()) {  // a pinned pipeline: its grid only
    return "context parallel: cp " + listed(outcome.pipeline_searched) +
           " searched beside cp 1 in the pipeline plans' grid (Note [Context-parallel search])" + planned + "\n";
  }
  return "context parallel: cp " + listed(outcome.searched) + " searched beside cp 1 (Note [Context-parallel search])" +
         pipeline + planned + "\n";
}

}  // namespace shardplan
