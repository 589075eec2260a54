// The pipeline search's grid (Note [Pipeline search] in search_pipeline.h): its points with their floors, the
// balanced split beside torchtitan's, and the split repaired for memory where a simulated point overflowed (Note
// [Balanced stage split] in stage_balance.h).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "search_pipeline.h"
#include "stage_balance.h"

namespace shardplan {

// What one grid setting (context-parallel, tensor-parallel and expert-parallel degree, checkpointing pattern) shares
// across its points: the TP view, one CP rank's share of the training, the per-layer floors and the buffers.
struct PipelineGridSetting {
  int context_parallel = 1;
  int tensor_parallel = 1;
  int expert_parallel = 1;
  KnobSetting knobs;
  std::shared_ptr<const TensorParallelSearchView> view;  // shared by the degree's settings
  TrainingConfig share;  // one CP rank's share, with the point's expert-parallel degree
  SettingFloors floors;
  PipelineBufferBytes buffers;  // Note [Pipeline buffers]: as the lowering sizes them
};

// One grid point before simulation: what builds its plan and its floor.
struct PipelinePoint {
  std::shared_ptr<const PipelineGridSetting> setting;
  int degree = 2;
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int stages_per_rank = 1;
  PipelinePolicy policy;
  int micro_batches = 1;
  double floor_s = 0;
  std::int64_t memory_floor_bytes = 0;  // Note [Pipeline floor]: the fullest rank's
  std::vector<int> balanced_blocks;     // Note [Balanced stage split]: its blocks per stage; empty: torchtitan's
  // Note [Balanced stage split]: torchtitan's split overflowed its memory floor, and another split is yet to be
  // sought for memory; floor_s is then a bound for every split, M · ΣC / pp.
  bool memory_split_pending = false;
  bool repaired = false;  // its split was chosen for memory (from the floors, or after a simulation overflowed)
};

// "pp 8, Interleaved1F1B x 2 stages per rank, balanced split 8/8/.../7 blocks, TP 8, full_shard, AC full, ...".
std::string describe_pipeline_point(const PipelinePoint& point);

class PipelineGrid {
 public:
  PipelineGrid(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
               const PipelineSearchOptions& options, PipelineSearchResult& result);

  // The points at one context-parallel degree (TP degree x checkpointing pattern x pp x schedule x split), `share`
  // being one CP rank's share of the batch: those whose floors leave room, counted in the result.
  void add_points(int context_parallel, const TrainingConfig& share);
  std::vector<PipelinePoint>& points() { return points_; }

  // Note [Balanced stage split]: a split of `point` for memory — where a simulation of it overflowed the usable
  // bytes (`simulated`), the split whose memory floors, each rank's raised by what its simulated peak was above its
  // floor, fit; for a pending point (memory_split_pending, `simulated` null), the split whose floors fit — with its
  // floors, ready to simulate; none where no split fits so.
  std::optional<PipelinePoint> repaired(const PipelinePoint& point, const PipelineStepAnalysis* simulated);

 private:
  std::vector<std::int64_t> rank_floor_bytes(const PipelinePoint& point, const PipelinePolicy& policy,
                                             PipelineFloorPeaks* peaks = nullptr);
  // The schedule's order for the point's shape, built once (InputError where torch refuses the shape).
  const PipelineOrder& order_of(const PipelinePoint& point);
  int data_parallel_ranks(const PipelinePoint& point) const;  // of each stage: world / (TP × pp)
  // Note [Balanced stage split]: the descent's input for the point's setting and schedule, from torchtitan's split
  // (time alone; the memory repair adds its overflow).
  StageBalanceInput balance_input(const PipelinePoint& point);
  // None where its memory floor (`over_memory` set) or its order rules it out.
  std::optional<PipelinePoint> floored(PipelinePoint point, bool* over_memory = nullptr);
  // Note [Balanced stage split]: whether the ranks' mean memory floor under torchtitan's split is within the usable
  // bytes, the cheap filter before a split is sought for memory (moving blocks between ranks keeps roughly their sum).
  bool memory_split_may_fit(const PipelinePoint& point);
  std::optional<PipelinePoint> with_split(const PipelinePoint& point, std::vector<int> blocks);

  const ModelSpec& model_;
  const Cluster& cluster_;
  const HardwareProfile& profile_;
  const PipelineSearchOptions& options_;
  PipelineSearchResult& result_;
  std::vector<PipelinePoint> points_;
  std::map<std::string, PipelineStatesFloor> states_floors_;  // Note [Pipeline floor]: by layout
  std::map<std::array<int, 4>, PipelineOrder> orders_;          // by schedule, pp, stages per rank, micro-batches
};

}  // namespace shardplan
