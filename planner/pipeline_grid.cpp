// The pipeline search's grid (Note [Pipeline search] in search_pipeline.h): points, floors (Note [Pipeline floor]),
// the balanced and the memory-repaired splits (Note [Balanced stage split] in stage_balance.h).
#include "pipeline_grid.h"

#include <algorithm>
#include <array>
#include <utility>

#include "communication_floor.h"
#include "errors.h"
#include "setting_floor_cache.h"
#include "stage_balance.h"
#include "stage_partition.h"
#include "unit_layout.h"

namespace shardplan {

namespace {

// Note [Virtual stages searched]: Interleaved1F1B runs v stages per rank; its bubble falls as 1/v (each rank's way in
// and out is one stage of 1/v of its layers) while the point-to-point sends grow as v, so v is searched, as torchtitan
// lets a user set it (pipeline_parallel_layers_per_stage): 2 (its default for the looped schedules), 4 and 8 while
// every stage keeps at least kLeastEffectiveLayersPerStage of torchtitan's effective layers (blocks, the embedding
// and the head weighing one each: torchtitan_stage_blocks). A bound on the work, not a proof: llama3.1-405b on 512
// H100s (pp 8, TP 8, 8 micro-batches of 4 x 8,192 tokens) steps 33.32 / 30.28 / 29.05 / 27.46 s at v = 2 / 3 / 4 / 8
// pinned; the powers of two keep the grid at a few more points per degree, most proven by their floors.
constexpr std::array<int, 3> kSearchedInterleavedStagesPerRank{2, 4, 8};
constexpr int kLeastEffectiveLayersPerStage = 2;

// The schedules searched at pipeline degree `degree`: the pinned one (Interleaved1F1B pinned without its stages per
// rank: each count Note [Virtual stages searched] allows — a knob left out is searched), or 1F1B, Interleaved1F1B with
// each such count, and interleaved zero-bubble with two stages per rank (Note [Pipeline search] says when).
std::vector<std::pair<PipelineScheduleKind, int>> schedules_of(const PipelineSearchOptions& options,
                                                               const ModelSpec& model, int degree) {
  const bool interleaved_pinned = options.schedule == PipelineScheduleKind::interleaved_1f1b;
  if (options.schedule && (options.stages_per_rank > 0 || !interleaved_pinned)) {
    return {{*options.schedule, options.stages_per_rank > 0 ? options.stages_per_rank
                                                            : default_stages_per_rank(*options.schedule)}};
  }
  std::vector<std::pair<PipelineScheduleKind, int>> schedules;
  if (!options.schedule) schedules.emplace_back(PipelineScheduleKind::one_f_one_b, 1);
  const auto effective_layers = static_cast<int>(model.block_count()) + 2;
  for (const int stages_per_rank : kSearchedInterleavedStagesPerRank) {
    const bool searched = stages_per_rank == default_stages_per_rank(PipelineScheduleKind::interleaved_1f1b) ||
                          degree * stages_per_rank * kLeastEffectiveLayersPerStage <= effective_layers;
    if (searched) schedules.emplace_back(PipelineScheduleKind::interleaved_1f1b, stages_per_rank);
  }
  if (!options.schedule) schedules.emplace_back(PipelineScheduleKind::interleaved_zero_bubble, 2);
  return schedules;
}

// Note [Pipeline micro-batch]: per checkpointing pattern and micro-batch, the first setting knob_settings gives (its
// leanest strategy, full_shard unless --strategy pins another): Note [Pipeline search] searches patterns and
// micro-batches, not strategies. The micro-batch is torchtitan's pipeline_parallel_microbatch_size (default 1), a
// knob the user may set: a larger one runs fewer, larger micro-batches — a longer bubble (it falls as 1/M) against
// kernels at a larger batch and fewer sends, which can win where a micro-batch's kernels are small — so each size
// knob_settings gives (those dividing the global batch over the TP view's ranks; a pinned --micro-batch alone) is
// a grid point, floored and pruned like the others.
std::vector<KnobSetting> pattern_settings(const Cluster& view_cluster, const TrainingConfig& training,
                                          const KnobPins& pins) {
  std::vector<KnobSetting> settings;
  for (const KnobSetting& knobs : knob_settings(view_cluster, training, false, pins)) {
    const auto same = std::find_if(settings.begin(), settings.end(), [&](const KnobSetting& kept) {
      return kept.ac == knobs.ac && kept.micro_batch == knobs.micro_batch;
    });
    if (same == settings.end()) settings.push_back(knobs);
  }
  return settings;
}

bool splits_backward(const PipelinePoint& point) {
  return point.schedule == PipelineScheduleKind::interleaved_zero_bubble;
}

}  // namespace

std::string describe_pipeline_point(const PipelinePoint& point) {
  const PipelineGridSetting& setting = *point.setting;
  std::string text = "pp " + std::to_string(point.degree) + ", " + to_string(point.schedule);
  if (point.stages_per_rank > 1) text += " x " + std::to_string(point.stages_per_rank) + " stages per rank";
  if (!point.balanced_blocks.empty()) {
    text += ", balanced split";
    for (std::size_t stage = 0; stage < point.balanced_blocks.size(); ++stage) {
      text += (stage == 0 ? " " : "/") + std::to_string(point.balanced_blocks[stage]);
    }
    text += " blocks";
  }
  if (setting.context_parallel > 1) text += ", CP " + std::to_string(setting.context_parallel);
  if (setting.expert_parallel > 1) text += ", EP " + std::to_string(setting.expert_parallel);
  text += ", TP " + std::to_string(setting.tensor_parallel) + ", " + setting.knobs.label() + ", " +
          std::to_string(point.micro_batches) + (point.micro_batches == 1 ? " micro-batch" : " micro-batches");
  return text;
}

PipelineGrid::PipelineGrid(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                           const PipelineSearchOptions& options, PipelineSearchResult& result)
    : model_(model), cluster_(cluster), profile_(profile), options_(options), result_(result) {}

const PipelineOrder& PipelineGrid::order_of(const PipelinePoint& point) {
  const std::array<int, 4> key{static_cast<int>(point.schedule), point.degree, point.stages_per_rank,
                               point.micro_batches};
  auto found = orders_.find(key);
  if (found == orders_.end()) {
    found = orders_
                .emplace(key, pipeline_order(point.schedule, point.degree, point.stages_per_rank, point.micro_batches))
                .first;
  }
  return found->second;
}

int PipelineGrid::data_parallel_ranks(const PipelinePoint& point) const {
  return cluster_.world_size() / (point.setting->tensor_parallel * point.degree);
}

StageBalanceInput PipelineGrid::balance_input(const PipelinePoint& point) {
  const PipelineGridSetting& setting = *point.setting;
  return {setting.floors.layer_compute_s, setting.floors.layer_forward_s,
          stage_block_counts(model_, point.policy.stages), point.degree, point.micro_batches, &order_of(point),
          splits_backward(point), {}};
}

std::vector<std::int64_t> PipelineGrid::rank_floor_bytes(const PipelinePoint& point, const PipelinePolicy& policy,
                                                         PipelineFloorPeaks* peaks) {
  const PipelineGridSetting& setting = *point.setting;
  // The states of each rank's layers, by TP degree, stages and strategy (not checkpointing or micro-batch).
  const KnobSetting strategy_only{setting.knobs.strategy, "", 0, false};
  std::string key = std::to_string(setting.context_parallel) + "/" + std::to_string(setting.tensor_parallel) + "/" +
                    std::to_string(setting.expert_parallel) + "/" + std::to_string(point.degree) + "/" +
                    std::to_string(point.stages_per_rank) + "/" + strategy_only.label();
  for (const LayerRange& stage : policy.stages) key += "/" + std::to_string(stage.end);
  auto states = states_floors_.find(key);
  if (states == states_floors_.end()) {
    states = states_floors_
                 .emplace(key, pipeline_states_floor(setting.view->model, setting.share, setting.knobs.strategy, policy,
                                                     data_parallel_ranks(point), setting.view->cluster.gpus_per_node))
                 .first;
  }
  const StageFloors stages = stage_floors(setting.floors, policy.stages);
  const PipelineOrder& order = order_of(point);
  std::vector<std::int64_t> bytes =
      pipeline_live_floor_bytes(stages.held_bytes, &states->second, order, &setting.buffers, peaks);
  for (std::int64_t& rank : bytes) rank += profile_.context_overhead_bytes;
  return bytes;
}

std::optional<PipelinePoint> PipelineGrid::floored(PipelinePoint point, bool* over_memory) {
  const StageFloors stages = stage_floors(point.setting->floors, point.policy.stages);
  point.floor_s = pipeline_step_floor_s(stages.compute_s, point.degree, point.micro_batches, splits_backward(point));
  std::vector<std::int64_t> rank_bytes;
  try {
    rank_bytes = rank_floor_bytes(point, point.policy);
  } catch (const InputError& error) {
    result_.refuse(error.what());  // an order torch refuses for this micro-batch count
    return std::nullopt;
  }
  point.memory_floor_bytes = *std::max_element(rank_bytes.begin(), rank_bytes.end());
  if (point.memory_floor_bytes > options_.usable_bytes) {
    if (over_memory != nullptr) {
      *over_memory = true;  // counted by the caller
    } else {
      ++result_.over_memory_floor;  // Note [Pipeline floor]: no rank of it can fit
    }
    return std::nullopt;
  }
  // Note [Pipeline floor]: the order's bubbles (it was built above without refusal), and each rank's streams.
  const PipelineOrder& order = order_of(point);
  point.floor_s = std::max(point.floor_s, pipeline_replay_floor_s(stages, order));
  point.floor_s = std::max(point.floor_s, pipeline_stretch_floor_s(stages, point.degree, point.micro_batches,
                                                                   least_overlap_compute_slowdown(profile_)));
  return point;
}

bool PipelineGrid::memory_split_may_fit(const PipelinePoint& point) {
  std::vector<std::int64_t> bytes;
  try {
    bytes = rank_floor_bytes(point, point.policy);
  } catch (const InputError&) {
    return false;
  }
  std::int64_t mean_bytes = 0;
  for (const std::int64_t rank : bytes) mean_bytes += rank / static_cast<std::int64_t>(bytes.size());
  return mean_bytes <= options_.usable_bytes;
}

std::optional<PipelinePoint> PipelineGrid::with_split(const PipelinePoint& point, std::vector<int> blocks) {
  PipelinePoint split = point;
  split.policy.stages = stage_layer_ranges(model_, blocks, "the balanced stage split");
  split.balanced_blocks = std::move(blocks);
  ++result_.balanced_splits;
  return floored(std::move(split));
}

void PipelineGrid::add_points(int context_parallel, const TrainingConfig& share) {
  const int world = cluster_.world_size();
  for (const int tensor_parallel : options_.tensor_parallel_degrees) {
    std::vector<KnobSetting> settings;
    std::shared_ptr<const TensorParallelSearchView> shared_view;
    try {
      if (tensor_parallel > 1) {
        validate_tensor_parallel_degree(tensor_parallel, model_, world, cluster_.gpus_per_node, "--tensor-parallel");
      }
      shared_view = std::make_shared<const TensorParallelSearchView>(
          tensor_parallel_search_view(tensor_parallel, model_, cluster_));
      settings = pattern_settings(shared_view->cluster, share, options_.pins);
    } catch (const InputError&) {
      continue;  // a degree this model or node cannot take is not a candidate
    }
    // Note [Pipeline search]: the expert-parallel degrees as the FSDP search takes them (a model with experts takes
    // TP 1 only, validate_tensor_parallel_degree), each point's training carrying its degree.
    for (const int expert_parallel : options_.expert_parallel_degrees) {
      TrainingConfig ep_share = share;
      ep_share.expert_parallel_degree = expert_parallel;
      TrainingConfig one_micro_batch = ep_share;
      one_micro_batch.global_batch = 0;
      const TensorParallelSearchView& view = *shared_view;
      for (const KnobSetting& knobs : settings) {
        auto setting = std::make_shared<PipelineGridSetting>();
        setting->context_parallel = context_parallel;
        setting->tensor_parallel = tensor_parallel;
        setting->expert_parallel = expert_parallel;
        setting->knobs = knobs;
        setting->share = ep_share;
        try {
          // Note [Pipeline floor]: one micro-batch's floors by layer (the TP view's ranks need not divide the batch);
          // under CP the CP rank's program with its ring (micro_batch_floors), else the share's alone, a looser bound.
          try {
            setting->floors = cached_setting_floors(options_.floor_cache.get(), view.model, view.cluster, profile_,
                                                    one_micro_batch, knobs, context_parallel);
          } catch (const InputError&) {
            if (context_parallel == 1) throw;
            setting->floors = cached_setting_floors(options_.floor_cache.get(), view.model, view.cluster, profile_,
                                                    one_micro_batch, knobs);
          }
        } catch (const InputError& error) {
          result_.refuse(error.what());
          continue;
        }
        TrainingConfig rank_training = ep_share;
        rank_training.micro_batch = knobs.micro_batch;
        setting->buffers = pipeline_buffer_bytes(model_, rank_training, tensor_parallel);
        setting->view = shared_view;
        double step_compute_s = 0;  // one micro-batch's compute floor over every layer
        for (const double layer_s : setting->floors.layer_compute_s) step_compute_s += layer_s;
        for (const int degree : options_.pipeline_degrees) {
          for (const auto& [schedule, stages_per_rank] : schedules_of(options_, model_, degree)) {
            // Note [Pipeline search]: the zero-bubble schedule is searched without checkpointing, compile or float8.
            if (!options_.schedule && schedule == PipelineScheduleKind::interleaved_zero_bubble &&
                (knobs.ac != "none" || share.torch_compile || share.precision.uses_fp8())) {
              continue;
            }
            ++result_.candidates;
            PipelinePoint point{setting, degree, schedule, stages_per_rank, {}, 1, 0.0, 0, {}, false};
            const std::int64_t ranks_per_stage = static_cast<std::int64_t>(tensor_parallel) * degree;
            if (world % (ranks_per_stage * context_parallel) != 0) {
              result_.refuse("pp " + std::to_string(degree) + " x TP " + std::to_string(tensor_parallel) + " x cp " +
                             std::to_string(context_parallel) + " does not divide the " + std::to_string(world) +
                             " GPUs");
              continue;
            }
            // Every data-parallel rank (dp × cp) runs its own micro-batches of shares.
            const std::int64_t shares_per_micro_batch = (world / ranks_per_stage) * knobs.micro_batch;
            if (share.global_batch % shares_per_micro_batch != 0) {
              result_.refuse("the global batch of " + std::to_string(share.global_batch) +
                             " sequences is not a multiple of " + std::to_string(world / ranks_per_stage) +
                             " data-parallel ranks x micro-batch " + std::to_string(knobs.micro_batch));
              continue;
            }
            point.micro_batches = static_cast<int>(share.global_batch / shares_per_micro_batch);
            try {
              point.policy = default_pipeline(model_, degree, schedule, stages_per_rank);
            } catch (const InputError& error) {
              result_.refuse(error.what());  // too few blocks for the stages
              continue;
            }
            bool over_memory = false;
            std::optional<PipelinePoint> torchtitan = floored(point, &over_memory);
            // Note [Balanced stage split]: a second split where a perfectly balanced pipeline, M · ΣC / pp, would be
            // faster than the best plan known: for time where torchtitan's fits by its floor; for memory, sought
            // when the point comes up in floor order, where it does not.
            const double balanced_bound_s = step_compute_s * point.micro_batches / degree;
            if (over_memory) {
              if (balanced_bound_s >= options_.known_step_s || !memory_split_may_fit(point)) {
                ++result_.over_memory_floor;
                continue;
              }
              PipelinePoint pending = point;
              pending.memory_split_pending = true;
              pending.floor_s = balanced_bound_s;
              points_.push_back(std::move(pending));
              continue;
            }
            if (!torchtitan) continue;
            points_.push_back(std::move(*torchtitan));
            if (balanced_bound_s >= options_.known_step_s) continue;
            std::vector<int> balanced = balanced_stage_blocks(model_, balance_input(point));
            if (balanced.empty()) continue;
            if (std::optional<PipelinePoint> split = with_split(point, std::move(balanced))) {
              points_.push_back(std::move(*split));
            }
          }
        }
      }
    }
  }
}

namespace {

// Note [Balanced stage split]'s memory estimate: per layer, the states pipeline_states_floor sums per stage and per
// rank, each layer laid out alone, and the activations it holds per micro-batch, as prefix sums by layer.
struct LayerMemory {
  std::vector<std::int64_t> states_before, held_before;
};

LayerMemory layer_memory(const PipelineGridSetting& setting, int data_parallel_ranks) {
  const ModelSpec& model = setting.view->model;
  LayerMemory memory{std::vector<std::int64_t>(model.layers.size() + 1, 0),
                     std::vector<std::int64_t>(model.layers.size() + 1, 0)};
  Plan states_only;
  states_only.training = setting.share;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    std::int64_t states = 0;
    try {
      const UnitLayout layout = states_floor_layout(setting.knobs.strategy, model, {layer}, setting.share,
                                                    data_parallel_ranks, setting.view->cluster.gpus_per_node);
      states += layout.gathers ? layout.gathered_bytes : 0;
      states += layout.grad_copies ? layout.grad_copy_bytes : 0;
      for (const std::int64_t bytes : persistent_memory({layout}, states_only, 0)) states += bytes;
    } catch (const InputError&) {
      // none counted where the layout refuses (the split's exact floors and its simulation judge it)
    }
    memory.states_before[layer + 1] = memory.states_before[layer] + states;
    memory.held_before[layer + 1] =
        memory.held_before[layer] + std::max<std::int64_t>(0, setting.floors.layer_held_activation_bytes[layer]);
  }
  return memory;
}

}  // namespace

std::optional<PipelinePoint> PipelineGrid::repaired(const PipelinePoint& point, const PipelineStepAnalysis* simulated) {
  if (point.repaired) return std::nullopt;
  const PipelineGridSetting& setting = *point.setting;
  // Each rank's exact floor under torchtitan's split and where it peaks; raised to the simulated peak where given.
  PipelineFloorPeaks peaks;
  std::vector<std::int64_t> base_bytes;
  try {
    base_bytes = rank_floor_bytes(point, point.policy, &peaks);
  } catch (const InputError&) {
    return std::nullopt;  // an order torch refuses for this micro-batch count
  }
  if (simulated != nullptr) {
    for (const PipelineRankSummary& rank : simulated->simulation.ranks) {
      const auto at = static_cast<std::size_t>(rank.rank);
      if (at < base_bytes.size()) base_bytes[at] = std::max(base_bytes[at], rank.device_peak_bytes);
    }
  }
  // Another split's ranks: the base plus, per stage, its change of states (all taken as live at the peak) and of
  // held activations times the micro-batches the stage holds at the rank's peak — O(stages) per split.
  const LayerMemory memory = layer_memory(setting, data_parallel_ranks(point));
  const auto ranks = static_cast<std::size_t>(point.degree);
  const auto stage_sum = [](const std::vector<std::int64_t>& before, const LayerRange& range) {
    return before[range.end] - before[range.begin];
  };
  StageBalanceInput balance = balance_input(point);
  balance.overflow_bytes = [&](const std::vector<int>& blocks) {
    const std::vector<LayerRange> stages = stage_layer_ranges(model_, blocks, "the balanced stage split");
    std::vector<std::int64_t> bytes = base_bytes;
    for (std::size_t stage = 0; stage < stages.size(); ++stage) {
      const LayerRange& was = point.policy.stages[stage];
      const std::size_t rank = stage % ranks;
      bytes[rank] += stage_sum(memory.states_before, stages[stage]) - stage_sum(memory.states_before, was) +
                     peaks.held_micro_batches[rank][stage] *
                         (stage_sum(memory.held_before, stages[stage]) - stage_sum(memory.held_before, was));
    }
    return std::max<std::int64_t>(0, *std::max_element(bytes.begin(), bytes.end()) - options_.usable_bytes);
  };
  std::vector<int> blocks = balanced_stage_blocks(model_, balance);
  if (blocks.empty()) return std::nullopt;
  PipelinePoint base = point;
  base.memory_split_pending = false;
  std::optional<PipelinePoint> split = with_split(base, std::move(blocks));
  if (split) split->repaired = true;
  return split;
}

}  // namespace shardplan
