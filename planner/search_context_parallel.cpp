// The search over context parallelism (search_context_parallel.h): one CP rank's search, the degree restored, the
// degree search.
#include "search_context_parallel.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "context_parallel_lowering.h"
#include "errors.h"
#include "memory_headroom.h"
#include "step_analysis.h"

namespace shardplan {

namespace {

// Note [Fixed context parallel degree] (planner/context_parallel_lowering.h): `plan --context-parallel N` keeps
// cp = N. The search runs on one CP rank's share of every sequence: every per-token cost and the activations are the
// rank's, but the ring's other cp − 1 attention steps and its K/V exchanges are not priced per candidate. The planned
// plan and the baselines then get the degree and the whole sequence back and are simulated as CP plans (Note
// [Context-parallel lowering]), so every figure printed is the CP plan's. A planned plan the ring's buffers push over
// the cap is no answer; the share is then searched again under a cap whose usable part is that plan's share peak
// less its overshoot (its ring's bytes taken as what any plan's ring adds), up to kRingRetries times. llama3.1-8b at
// 131,072 tokens on 16 H100s with `--context-parallel 4` answered "no plan fits" (the share's best, TP 4,
// hybrid_shard:2, AC 25 %, 0.03 GiB over the cap with its ring) where CP 4 plans fit; llama3.1-405b at 131,072
// tokens on 512 H100s, cp searched, had no plan at all and now plans CP 2 (Note [Context-parallel search]).
constexpr int kRingRetries = 3;

// The best plan and the baselines given the degree back; true where the best, simulated with its ring, fits within
// `usable_bytes`. Where it does not, `share_room_bytes` is the share's peak that would have left its ring room: its
// own share peak less its overshoot, less one byte.
bool restore_context_parallel(SearchResult& result, const TrainingConfig& training, int degree, const ModelSpec& model,
                              const Cluster& cluster, const HardwareProfile& profile, std::int64_t usable_bytes,
                              std::int64_t& share_room_bytes) {
  const auto restore = [&](PlanCandidate& candidate) {
    candidate.plan.training.seq_len = training.seq_len;
    candidate.plan.training.global_batch = training.global_batch;
    candidate.plan.context_parallel.degree = degree;
    candidate.summary = analyze_step(model, cluster, profile, candidate.plan, false).simulation.summary;
    candidate.fits = fits_in_memory(candidate.summary, usable_bytes);
  };
  const auto peak_bytes = [](const SimulationSummary& summary) {
    return std::max(summary.device_peak_bytes, summary.peak_memory_bytes);
  };
  share_room_bytes = 0;
  bool ring_overflows = false;
  if (result.feasible) {
    const std::int64_t share_peak_bytes = peak_bytes(result.best.summary);
    restore(result.best);
    result.best.knobs = "CP " + std::to_string(degree) + ", " + result.best.knobs;
    if (!result.best.fits) {
      result.feasible = false;
      ring_overflows = true;
      share_room_bytes = share_peak_bytes - (peak_bytes(result.best.summary) - usable_bytes) - 1;
      result.diagnosis.dominant_term = "the ring's buffers: the best plan of one CP rank's share does not fit with "
                                       "context parallel " + std::to_string(degree);
    }
  }
  for (BaselineResult& baseline : result.baselines) {
    try {
      restore(baseline.candidate);
    } catch (const InputError&) {
      baseline.candidate.fits = false;  // a baseline the CP plan cannot take (e.g. DDP's world): not comparable
    }
  }
  return !ring_overflows;
}

SearchResult search_at_degree(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                              const TrainingConfig& training, SearchOptions options, int degree) {
  std::erase_if(options.tensor_parallel_degrees,
                [&](int tp) { return cluster.world_size() % (tp * degree) != 0; });
  if (options.tensor_parallel_degrees.empty()) options.tensor_parallel_degrees = {1};
  options.context_parallel_floor_degree = degree;  // Note [Context-parallel floors]
  const MemoryHeadroom usable{options.memory_cap_bytes > 0 ? options.memory_cap_bytes : cluster.gpu.memory_bytes,
                              options.memory_headroom_fraction};
  const TrainingConfig share = context_parallel_share_training(training, degree);
  SearchResult result;
  std::int64_t share_cap_bytes = usable.cap_bytes;
  for (int attempt = 0;; ++attempt) {
    options.memory_cap_bytes = share_cap_bytes;
    result = search_plans(model, cluster, profile, share, options);
    std::int64_t share_room_bytes = 0;
    const bool answered = restore_context_parallel(result, training, degree, model, cluster, profile,
                                                   usable.usable_bytes(), share_room_bytes);
    if (answered || attempt == kRingRetries || share_room_bytes <= 0) break;
    // Note [Fixed context parallel degree]: a cap whose usable part is that room (the headroom a share of it).
    share_cap_bytes = static_cast<std::int64_t>(static_cast<double>(share_room_bytes) / (1.0 - usable.fraction));
  }
  // What the output says of the cap and headroom: the user's, not a retry's.
  result.memory_cap_bytes = usable.cap_bytes;
  result.memory_headroom_bytes = usable.headroom_bytes();
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

// Note [Context-parallel floors]: the search at a degree runs on one CP rank's share, whose setting floors hold one
// ring step of attention and no ring buffers, so they prune little against plans with the ring: for llama3.1-405b at
// 32,768 tokens on 512 H100s the share's floors were 154-186 s against a 229 s plan, and cp 2, 4 and 8 took 1.1 of
// the plan's 1.4 s to find nothing faster. So each setting is first floored as the CP rank's program itself, its
// ring included (micro_batch_floors with the degree, as the pipeline grid floors its CP points): a setting whose
// states and activations with the ring's buffers exceed the cap, or whose step floor (setting_step_floor_s) exceeds
// the best plan known before the degree's search (SearchOptions::known_step_s: a plan simulated with its ring, or
// without CP — never the share's own plans, whose steps lack the ring), is proven without a search
// (Searcher::ruled_out_by_ring_floors). Every CP plan of such a setting is at least its floor, so none it drops could
// beat or fit; what stays is searched as before, on the share. The 405B plan takes 0.6 s, the same plan (cp 8's floors
// start at 245 s). The share's best plan is still a heuristic for the best CP plan: with the settings that cannot win
// gone, its best is more often one whose ring costs little — llama3.1-8b at 131,072 tokens on 16 H100s now plans CP 8
// at 69.82 s: the share's best plan at cp 8 had been TP 2 without checkpointing, 99.66 s with its ring, so cp 2's
// 75.72 s was planned; that setting's ring floor is above 75.72 s.

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
    if (found.feasible && (!best.feasible || found.best.summary.step_time_s < best.best.summary.step_time_s)) {
      best = std::move(found);
      outcome.degree = degree;
    }
  }
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
           ": fixed by --context-parallel; the wrapping search ran on one CP rank's seq/cp tokens; the planned plan "
           "and the baselines are simulated with the ring\n";
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
