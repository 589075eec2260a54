// The plan search over pipeline parallelism (Note [Pipeline search] in search_pipeline.h): the grid's candidates,
// their floors (Note [Pipeline floor]), and the simulation of those a floor does not rule out, in floor order.
#include "search_pipeline.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "context_parallel_lowering.h"
#include "errors.h"
#include "indexed_pool.h"
#include "pipeline_grid.h"

namespace shardplan {

namespace {

// Note [Pipeline waves]: 4, as Note [Setting waves]'s width: wide enough for the cores of a laptop, narrow enough that
// a wave's later points still prune with what its earlier waves found.
constexpr std::size_t kPointsPerWave = 4;

// Note [Pipeline search]: a bound on the search's work, not a proof — the degrees searched leave every pipeline rank at
// least this many blocks. The published pipelines of this size run 8 to 16 blocks per rank (torchtitan's 405B: pp 8,
// Table 5 of its Llama 3 report; Meta's Llama 3 405B: pp 16, 126 layers), and a deeper one's step simulates hundreds
// of micro-batches over dozens of programs (llama3.1-405b on 256 H100s: pp 32 and 64 took 0.3 s of a 0.8 s plan and
// none fitted). --pipeline-parallel reaches any degree.
constexpr int kLeastBlocksPerPipelineRank = 4;

// One point's plan, lowered into its programs and simulated; none where the lowering refuses it (InputError).
// `training` is the user's (the whole sequence); the point's knobs and micro-batch count are over its CP share.
// None where the lowering refuses the point, with its reason in `refusal`.
std::optional<PipelineCandidate> simulate_point(const PipelinePoint& point, const ModelSpec& model,
                                                const Cluster& cluster, const HardwareProfile& profile,
                                                const TrainingConfig& training, std::int64_t usable_bytes,
                                                std::string& refusal) {
  const PipelineGridSetting& setting = *point.setting;
  Plan shape;
  shape.tensor_parallel_degree = setting.tensor_parallel;
  shape.pipeline.degree = point.degree;
  shape.context_parallel.degree = setting.context_parallel;
  PipelineCandidate candidate;
  try {
    const int data_parallel_ranks = parallel_dims(shape, cluster.world_size()).data_parallel_world_size();
    TrainingConfig point_training = training;
    point_training.expert_parallel_degree = setting.expert_parallel;
    candidate.plan = plan_for_knobs(model, data_parallel_ranks,
                                    context_parallel_share_training(point_training, setting.context_parallel),
                                    setting.knobs);
    // Note [Fixed context parallel degree]: the CP plan, its micro-batch count the share's.
    candidate.plan.training.seq_len = training.seq_len;
    candidate.plan.training.global_batch = training.global_batch;
    candidate.plan.context_parallel.degree = setting.context_parallel;
    candidate.plan.tensor_parallel_degree = setting.tensor_parallel;
    candidate.plan.pipeline = point.policy;
    candidate.plan.name = "planned";
    candidate.analysis = analyze_pipeline_step(model, cluster, profile, candidate.plan);
  } catch (const InputError& error) {
    refusal = error.what();
    return std::nullopt;
  }
  const auto& ranks = candidate.analysis.simulation.ranks;
  candidate.fits = std::all_of(ranks.begin(), ranks.end(), [&](const PipelineRankSummary& rank) {
    return rank.device_peak_bytes <= usable_bytes;
  });
  return candidate;
}

}  // namespace

void PipelineSearchResult::refuse(const std::string& reason) {
  ++refused;
  if (refusal_reasons.size() < kRefusalReasonsKept &&
      std::find(refusal_reasons.begin(), refusal_reasons.end(), reason) == refusal_reasons.end()) {
    refusal_reasons.push_back(reason);
  }
}

std::string pipeline_model_conflict(const ModelSpec& model, const TrainingConfig& training, const KnobPins& pins) {
  if (const std::string tie = pipeline_tie(model); !tie.empty()) {
    return "a model whose " + tie.substr(std::string("layer ").size()) +
           ": a pipeline puts them on different stages, which is not modelled";
  }
  if (training.optimizer_in_backward) return "--optimizer-in-backward (torchtitan refuses it with a pipeline)";
  if (pins.offload.value_or(false)) return "--cpu-offload (not modelled with pipeline parallelism)";
  return "";
}

std::vector<int> pipeline_degree_candidates(const ModelSpec& model, const Cluster& cluster) {
  std::vector<int> degrees;
  const auto blocks = static_cast<int>(model.block_count());
  for (int degree = 2; degree * kLeastBlocksPerPipelineRank <= blocks && degree <= cluster.world_size(); degree *= 2) {
    if (cluster.world_size() % degree == 0) degrees.push_back(degree);
  }
  return degrees;
}

PipelineSearchResult search_pipeline_plans(const ModelSpec& model, const Cluster& cluster,
                                           const HardwareProfile& profile, const TrainingConfig& training,
                                           const PipelineSearchOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  PipelineSearchResult result;
  const int world = cluster.world_size();
  // Note [Equal global batch]: the user's, or one micro-batch per GPU of the whole world.
  TrainingConfig at_batch = training;
  if (at_batch.global_batch == 0) at_batch.global_batch = training.micro_batch * world;
  PipelineGrid grid(model, cluster, profile, options, result);
  result.context_parallel_degrees = options.context_parallel_degrees;
  result.expert_parallel_degrees = options.expert_parallel_degrees;
  for (const int context_parallel : options.context_parallel_degrees) {
    // Note [Fixed context parallel degree]: the grid's floors and micro-batch counts are one CP rank's share's.
    TrainingConfig share;
    try {
      share = context_parallel_share_training(at_batch, context_parallel);
    } catch (const InputError&) {
      continue;  // a degree this batch cannot take (a pinned one is checked by the command)
    }
    grid.add_points(context_parallel, share);
  }
  std::vector<PipelinePoint>& points = grid.points();
  // Floor order, ties in enumeration order: the incumbent is fast early and prunes the most.
  std::stable_sort(points.begin(), points.end(),
                   [](const PipelinePoint& a, const PipelinePoint& b) { return a.floor_s < b.floor_s; });
  const auto incumbent_s = [&] {
    return std::min(options.known_step_s,
                    result.feasible ? result.best.analysis.simulation.step_time_s
                                    : std::numeric_limits<double>::infinity());
  };
  // Note [Pipeline waves]: the points in waves of kPointsPerWave, simulated on options.threads; every point of a wave
  // is judged against the incumbent of the wave's start and the wave merged in floor order, so the answer does not
  // depend on the thread count (as Note [Setting waves] in searcher.cpp). A simulated point that overflows gets its
  // memory-repaired split (Note [Balanced stage split]), simulated in the waves that follow.
  // A point found later goes among those not yet taken, in floor order (after its equals: deterministic).
  const auto insert_in_order = [&](std::size_t from, PipelinePoint point) {
    const auto later = [](double floor_s, const PipelinePoint& other) { return floor_s < other.floor_s; };
    const auto at =
        std::upper_bound(points.begin() + static_cast<std::ptrdiff_t>(from), points.end(), point.floor_s, later);
    points.insert(at, std::move(point));
  };
  for (std::size_t next = 0; next < points.size();) {
    std::vector<std::size_t> wave;
    const double wave_incumbent_s = incumbent_s();
    for (; next < points.size() && wave.size() < kPointsPerWave; ++next) {
      if (points[next].floor_s >= wave_incumbent_s) {
        ++result.beaten_by_floor;  // Note [Pipeline floor]: no faster than the best known
        continue;
      }
      if (points[next].memory_split_pending) {
        // Note [Balanced stage split]: torchtitan's split overflowed its floor; a split for memory, in its turn.
        std::optional<PipelinePoint> split = grid.repaired(points[next], nullptr);
        if (split) {
          insert_in_order(next + 1, std::move(*split));
        } else {
          ++result.over_memory_floor;
        }
        continue;
      }
      wave.push_back(next);
    }
    std::vector<std::optional<PipelineCandidate>> simulated(wave.size());
    std::vector<std::string> refusals(wave.size());
    run_indexed(wave.size(), options.threads, [&](std::size_t index) {
      simulated[index] = simulate_point(points[wave[index]], model, cluster, profile, at_batch, options.usable_bytes,
                                        refusals[index]);
    });
    std::vector<PipelinePoint> repairs;
    for (std::size_t index = 0; index < wave.size(); ++index) {
      if (!simulated[index]) {
        result.refuse(refusals[index]);  // e.g. a schedule the micro-batch count does not fit
        continue;
      }
      ++result.simulated;
      PipelineCandidate& candidate = *simulated[index];
      if (!candidate.fits) {
        const PipelinePoint& point = points[wave[index]];
        if (point.floor_s < incumbent_s()) {
          if (std::optional<PipelinePoint> repair = grid.repaired(point, &candidate.analysis)) {
            repairs.push_back(std::move(*repair));
          }
        }
        continue;
      }
      if (candidate.analysis.simulation.step_time_s >= incumbent_s()) continue;
      candidate.knobs = describe_pipeline_point(points[wave[index]]);
      result.best = std::move(candidate);
      result.feasible = true;
    }
    for (PipelinePoint& repair : repairs) insert_in_order(next, std::move(repair));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace shardplan
