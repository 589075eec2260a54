// The plan search over pipeline parallelism (Note [Pipeline search] in search_pipeline.h): the grid's candidates,
// their floors (Note [Pipeline floor]), and the simulation of those a floor does not rule out, in floor order.
#include "search_pipeline.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <utility>

#include "communication_floor.h"
#include "context_parallel_lowering.h"
#include "errors.h"
#include "indexed_pool.h"
#include "setting_floor_cache.h"
#include "stage_balance.h"
#include "stage_partition.h"

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

// One grid point before simulation: what builds its plan and its floor.
struct PipelinePoint {
  int context_parallel = 1;
  int tensor_parallel = 1;
  int expert_parallel = 1;
  int degree = 2;
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int stages_per_rank = 1;
  KnobSetting knobs;
  PipelinePolicy policy;
  int micro_batches = 1;
  double floor_s = 0;
  std::int64_t memory_floor_bytes = 0;  // Note [Pipeline floor]: the fullest rank's
  std::vector<int> balanced_blocks;     // Note [Balanced stage split]: its blocks per stage; empty: torchtitan's
};

// The schedules searched: the pinned one, or 1F1B, interleaved 1F1B (torchtitan's default and its interleaved choice
// for deep models) and interleaved zero-bubble with two stages per rank (Note [Pipeline search] says when).
std::vector<std::pair<PipelineScheduleKind, int>> schedules_of(const PipelineSearchOptions& options) {
  if (options.schedule) {
    return {{*options.schedule, options.stages_per_rank > 0 ? options.stages_per_rank
                                                            : default_stages_per_rank(*options.schedule)}};
  }
  return {{PipelineScheduleKind::one_f_one_b, 1}, {PipelineScheduleKind::interleaved_1f1b, 2},
          {PipelineScheduleKind::interleaved_zero_bubble, 2}};
}

// Per checkpointing pattern, the first setting of the smallest micro-batch knob_settings gives (its leanest strategy,
// full_shard unless --strategy pins another): Note [Pipeline search] searches patterns, not strategies.
std::vector<KnobSetting> pattern_settings(const Cluster& view_cluster, const TrainingConfig& training,
                                          const KnobPins& pins) {
  std::vector<KnobSetting> settings;
  for (const KnobSetting& knobs : knob_settings(view_cluster, training, false, pins)) {
    const auto same = std::find_if(settings.begin(), settings.end(),
                                   [&](const KnobSetting& kept) { return kept.ac == knobs.ac; });
    if (same == settings.end()) {
      settings.push_back(knobs);
    } else if (knobs.micro_batch < same->micro_batch) {
      *same = knobs;
    }
  }
  return settings;
}

std::string describe_point(const PipelinePoint& point) {
  std::string text = "pp " + std::to_string(point.degree) + ", " + to_string(point.schedule);
  if (point.stages_per_rank > 1) text += " x " + std::to_string(point.stages_per_rank) + " stages per rank";
  if (!point.balanced_blocks.empty()) {
    text += ", balanced split";
    for (std::size_t stage = 0; stage < point.balanced_blocks.size(); ++stage) {
      text += (stage == 0 ? " " : "/") + std::to_string(point.balanced_blocks[stage]);
    }
    text += " blocks";
  }
  if (point.context_parallel > 1) text += ", CP " + std::to_string(point.context_parallel);
  if (point.expert_parallel > 1) text += ", EP " + std::to_string(point.expert_parallel);
  text += ", TP " + std::to_string(point.tensor_parallel) + ", " + point.knobs.label() + ", " +
          std::to_string(point.micro_batches) + (point.micro_batches == 1 ? " micro-batch" : " micro-batches");
  return text;
}

// One point's plan, lowered into its programs and simulated; none where the lowering refuses it (InputError).
// `training` is the user's (the whole sequence); the point's knobs and micro-batch count are over its CP share.
// None where the lowering refuses the point, with its reason in `refusal`.
std::optional<PipelineCandidate> simulate_point(const PipelinePoint& point, const ModelSpec& model,
                                                const Cluster& cluster, const HardwareProfile& profile,
                                                const TrainingConfig& training, std::int64_t usable_bytes,
                                                std::string& refusal) {
  Plan shape;
  shape.tensor_parallel_degree = point.tensor_parallel;
  shape.pipeline.degree = point.degree;
  shape.context_parallel.degree = point.context_parallel;
  PipelineCandidate candidate;
  try {
    const int data_parallel_ranks = parallel_dims(shape, cluster.world_size()).data_parallel_world_size();
    TrainingConfig point_training = training;
    point_training.expert_parallel_degree = point.expert_parallel;
    candidate.plan = plan_for_knobs(model, data_parallel_ranks,
                                    context_parallel_share_training(point_training, point.context_parallel),
                                    point.knobs);
    // Note [Fixed context parallel degree]: the CP plan, its micro-batch count the share's.
    candidate.plan.training.seq_len = training.seq_len;
    candidate.plan.training.global_batch = training.global_batch;
    candidate.plan.context_parallel.degree = point.context_parallel;
    candidate.plan.tensor_parallel_degree = point.tensor_parallel;
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

namespace {

// What the grid's points are gathered into, and the result whose counts they update.
struct GridPoints {
  std::vector<PipelinePoint>& points;
  std::map<std::string, PipelineStatesFloor>& states_floors;  // Note [Pipeline floor]: by layout
  PipelineSearchResult& result;
};

// The grid's points at one context-parallel degree (TP degree x checkpointing pattern x pp x schedule), `share` being
// one CP rank's share of the batch: those whose floors leave room, counted in the result.
void add_grid_points(int context_parallel, const TrainingConfig& share, const ModelSpec& model, const Cluster& cluster,
                     const HardwareProfile& profile, const PipelineSearchOptions& options, GridPoints& grid) {
  const int world = cluster.world_size();
  PipelineSearchResult& result = grid.result;
  std::vector<PipelinePoint>& points = grid.points;
  std::map<std::string, PipelineStatesFloor>& states_floors = grid.states_floors;
  for (const int tensor_parallel : options.tensor_parallel_degrees) {
    std::vector<KnobSetting> settings;
    TensorParallelSearchView view{model, cluster};
    try {
      if (tensor_parallel > 1) {
        validate_tensor_parallel_degree(tensor_parallel, model, world, cluster.gpus_per_node, "--tensor-parallel");
      }
      view = tensor_parallel_search_view(tensor_parallel, model, cluster);
      settings = pattern_settings(view.cluster, share, options.pins);
    } catch (const InputError&) {
      continue;  // a degree this model or node cannot take is not a candidate
    }
    // Note [Pipeline search]: the expert-parallel degrees as the FSDP search takes them (a model with experts takes
    // TP 1 only, validate_tensor_parallel_degree), each point's training carrying its degree.
    for (const int expert_parallel : options.expert_parallel_degrees) {
      TrainingConfig ep_share = share;
      ep_share.expert_parallel_degree = expert_parallel;
      TrainingConfig one_micro_batch = ep_share;
      one_micro_batch.global_batch = 0;
      for (const KnobSetting& knobs : settings) {
        SettingFloors floors;
        try {
          // Note [Pipeline floor]: one micro-batch's floors by layer (the TP view's ranks need not divide the batch);
          // under CP the CP rank's program with its ring (micro_batch_floors), else the share's alone, a looser bound.
          try {
            floors = cached_setting_floors(options.floor_cache.get(), view.model, view.cluster, profile,
                                           one_micro_batch, knobs, context_parallel);
          } catch (const InputError&) {
            if (context_parallel == 1) throw;
            floors = cached_setting_floors(options.floor_cache.get(), view.model, view.cluster, profile,
                                           one_micro_batch, knobs);
          }
        } catch (const InputError& error) {
          result.refuse(error.what());
          continue;
        }
        for (const int degree : options.pipeline_degrees) {
          for (const auto& [schedule, stages_per_rank] : schedules_of(options)) {
            // Note [Pipeline search]: the zero-bubble schedule is searched without checkpointing, compile or float8.
            if (!options.schedule && schedule == PipelineScheduleKind::interleaved_zero_bubble &&
                (knobs.ac != "none" || share.torch_compile || share.precision.uses_fp8())) {
              continue;
            }
            ++result.candidates;
            PipelinePoint point{context_parallel, tensor_parallel, expert_parallel, degree, schedule, stages_per_rank,
                                knobs, {}, 1, 0.0, 0, {}};
            const std::int64_t ranks_per_stage = static_cast<std::int64_t>(tensor_parallel) * degree;
            if (world % (ranks_per_stage * context_parallel) != 0) {
              result.refuse("pp " + std::to_string(degree) + " x TP " + std::to_string(tensor_parallel) + " x cp " +
                            std::to_string(context_parallel) + " does not divide the " + std::to_string(world) +
                            " GPUs");
              continue;
            }
            // Every data-parallel rank (dp × cp) runs its own micro-batches of shares.
            const std::int64_t shares_per_micro_batch = (world / ranks_per_stage) * knobs.micro_batch;
            if (share.global_batch % shares_per_micro_batch != 0) {
              result.refuse("the global batch of " + std::to_string(share.global_batch) +
                            " sequences is not a multiple of " + std::to_string(world / ranks_per_stage) +
                            " data-parallel ranks x micro-batch " + std::to_string(knobs.micro_batch));
              continue;
            }
            point.micro_batches = static_cast<int>(share.global_batch / shares_per_micro_batch);
            try {
              point.policy = default_pipeline(model, degree, schedule, stages_per_rank);
            } catch (const InputError& error) {
              result.refuse(error.what());  // too few blocks for the stages
              continue;
            }
            const bool split_backward = schedule == PipelineScheduleKind::interleaved_zero_bubble;
            // Admits a point whose floors leave room; false where its memory floor or its order rules it out.
            const auto admit = [&](PipelinePoint candidate) {
              const StageFloors stages = stage_floors(floors, candidate.policy.stages);
              candidate.floor_s = pipeline_step_floor_s(stages.compute_s, degree, candidate.micro_batches,
                                                        split_backward);
              // The states of each rank's layers, by TP degree, stages and strategy (not checkpointing or
              // micro-batch).
              const KnobSetting strategy_only{knobs.strategy, "", 0, false};
              std::string states_key = std::to_string(context_parallel) + "/" + std::to_string(tensor_parallel) + "/" +
                                       std::to_string(expert_parallel) + "/" + std::to_string(degree) + "/" +
                                       std::to_string(stages_per_rank) + "/" + strategy_only.label();
              for (const LayerRange& stage : candidate.policy.stages) states_key += "/" + std::to_string(stage.end);
              auto states = states_floors.find(states_key);
              if (states == states_floors.end()) {
                const int data_parallel_ranks = static_cast<int>(world / ranks_per_stage);
                states = states_floors
                             .emplace(states_key, pipeline_states_floor(view.model, ep_share, knobs.strategy,
                                                                        candidate.policy, data_parallel_ranks,
                                                                        view.cluster.gpus_per_node))
                             .first;
              }
              // Note [Pipeline buffers]: the pipeline's own tensors of each micro-batch, as the lowering sizes them.
              TrainingConfig rank_training = ep_share;
              rank_training.micro_batch = knobs.micro_batch;
              const PipelineBufferBytes buffers = pipeline_buffer_bytes(model, rank_training, tensor_parallel);
              std::vector<std::int64_t> rank_bytes;
              try {
                rank_bytes = pipeline_live_floor_bytes(stages.held_bytes, &states->second, degree, schedule,
                                                       candidate.micro_batches, &buffers);
              } catch (const InputError& error) {
                result.refuse(error.what());  // an order torch refuses for this micro-batch count
                return false;
              }
              candidate.memory_floor_bytes =
                  profile.context_overhead_bytes + *std::max_element(rank_bytes.begin(), rank_bytes.end());
              if (candidate.memory_floor_bytes > options.usable_bytes) {
                ++result.over_memory_floor;  // Note [Pipeline floor]: no rank of it can fit
                return false;
              }
              // Note [Pipeline floor]: the order's bubbles (it was built above without refusal).
              const PipelineOrder order = pipeline_order(schedule, degree, stages_per_rank, candidate.micro_batches);
              candidate.floor_s = std::max(candidate.floor_s, pipeline_replay_floor_s(stages, order));
              candidate.floor_s =
                  std::max(candidate.floor_s, pipeline_stretch_floor_s(stages, degree, candidate.micro_batches,
                                                                       least_overlap_compute_slowdown(profile)));
              points.push_back(std::move(candidate));
              return true;
            };
            PipelinePoint other = point;
            // Note [Balanced stage split]: a second split beside torchtitan's where that one's memory floor leaves
            // room (memory is not what the split balances) and a perfectly balanced pipeline, M · ΣC / pp, would
            // be faster than the best plan known.
            if (!admit(std::move(point))) continue;
            double step_compute_s = 0;
            for (const double layer_s : floors.layer_compute_s) step_compute_s += layer_s;
            if (step_compute_s * other.micro_batches / degree >= options.known_step_s) continue;
            std::vector<int> balanced;
            try {
              const PipelineOrder order = pipeline_order(schedule, degree, stages_per_rank, other.micro_batches);
              const std::vector<int> torchtitan_blocks = stage_block_counts(model, other.policy.stages);
              balanced = balanced_stage_blocks(model, {floors.layer_compute_s, floors.layer_forward_s, torchtitan_blocks,
                                                       degree, other.micro_batches, &order, split_backward});
            } catch (const InputError&) {
              continue;  // an order torch refuses (counted with torchtitan's split)
            }
            if (balanced.empty()) continue;
            other.policy.stages = stage_layer_ranges(model, balanced, "the balanced stage split");
            other.balanced_blocks = std::move(balanced);
            ++result.candidates;
            admit(std::move(other));
          }
        }
      }
    }
  }
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
  std::vector<PipelinePoint> points;
  std::map<std::string, PipelineStatesFloor> states_floors;  // Note [Pipeline floor]: by layout
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
    GridPoints grid{points, states_floors, result};
    add_grid_points(context_parallel, share, model, cluster, profile, options, grid);
  }
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
  // depend on the thread count (as Note [Setting waves] in searcher.cpp).
  for (std::size_t next = 0; next < points.size();) {
    std::vector<const PipelinePoint*> wave;
    const double wave_incumbent_s = incumbent_s();
    for (; next < points.size() && wave.size() < kPointsPerWave; ++next) {
      if (points[next].floor_s >= wave_incumbent_s) {
        ++result.beaten_by_floor;  // Note [Pipeline floor]: no faster than the best known
        continue;
      }
      wave.push_back(&points[next]);
    }
    std::vector<std::optional<PipelineCandidate>> simulated(wave.size());
    std::vector<std::string> refusals(wave.size());
    run_indexed(wave.size(), options.threads, [&](std::size_t index) {
      simulated[index] =
          simulate_point(*wave[index], model, cluster, profile, at_batch, options.usable_bytes, refusals[index]);
    });
    for (std::size_t index = 0; index < wave.size(); ++index) {
      if (!simulated[index]) {
        result.refuse(refusals[index]);  // e.g. a schedule the micro-batch count does not fit
        continue;
      }
      ++result.simulated;
      PipelineCandidate& candidate = *simulated[index];
      if (!candidate.fits || candidate.analysis.simulation.step_time_s >= incumbent_s()) continue;
      candidate.knobs = describe_point(*wave[index]);
      result.best = std::move(candidate);
      result.feasible = true;
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace shardplan
