// The pipeline search's balanced stage split (Note [Balanced stage split]): blocks moved between neighbouring stages
// until the pipeline's step floor stops falling.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model_spec.h"
#include "pipeline_order.h"

namespace shardplan {

// Note [Balanced stage split]: torchtitan's default split (generate_llm_fqn_per_model_part, torchtitan_stage_blocks)
// weighs the embedding and the head as one block each and deals the rest evenly, so a stage's time follows its block
// count, not its kernels. Where a block count does not divide, or the head with its loss weighs more than a block
// (llama3-8b: 525 M head parameters against 218 M per block, and the fp32 loss), one stage runs longer than the
// others and the whole pipeline waits for it. The pipeline grid (Note [Pipeline search]) therefore tries a second
// split beside torchtitan's at each point: the one that lowers the compute floor of Note [Pipeline floor] — the
// step floor (pipeline_step_floor_s: the busiest rank's M · C_r, and the last rank's M · C_{pp−1} plus the way in
// and out) and the schedule's own order replayed with each stage's floors (pipeline_replay_floor_s, which holds the
// bubbles) — over the splits with at least one block per stage:
// - with one stage per rank, starting from the min-max linear partition of the blocks' floors
//   (balanced_stage_partition: exact for the busiest-rank term), else from torchtitan's split (a rank's stages are
//   not adjacent, so no linear partition balances ranks);
// - then moving one block across one stage boundary at a time, the move that lowers the floor most, until none does
//   (a local optimum: the split is a heuristic candidate, simulated like the grid's others).
// A block's time is its layers' floors (SettingFloors::layer_compute_s, layer_forward_s) with the non-block layers
// before it, which stage_layer_ranges puts on the block's stage; the layers after the last block go with the last
// block.
// Memory: where torchtitan's split fits by the grid's memory floor, the split balances time alone and the memory
// floor judges it after, as it judges torchtitan's. A split is also sought for memory (PipelineGrid::repaired in
// pipeline_grid.h) where torchtitan's does not fit — most often the last stage, which keeps every micro-batch's output
// until the step ends (llama3.1-405b at 32,768 tokens, pp 8 1F1B: 83 GiB on the last rank, 53-63 on the others), or
// 1F1B's first, which holds pp micro-batches of activations: by its memory floor (when the point comes up in floor
// order, and only where the ranks' mean floor is within the usable bytes: moving blocks keeps roughly their sum), or
// by its simulation (the floors fit, a simulated rank did not). Its ranks are estimated from torchtitan's — the
// exact floor, or the simulated peak where higher — plus each stage's change of states (each layer laid out alone,
// all taken as live) and of held activations times the micro-batches that stage holds at its rank's peak (the floor
// walk's, PipelineFloorPeaks): O(stages) per split. The descent takes `overflow_bytes` (how far the fullest estimate
// is over the usable bytes) first and time second: moves lower the overflow until it is 0 (the step floor alone
// ordering equal overflows), then lower the time among splits that fit. Such a split is returned only where it fits
// by the estimate; its exact floors and its simulation judge it as any other point's.
struct StageBalanceInput {
  std::vector<double> layer_compute_s;  // per model layer: forward, recompute and backward of one micro-batch
  std::vector<double> layer_forward_s;  // per model layer: the forward part of it
  std::vector<int> start_blocks;        // torchtitan's split: blocks per stage
  int pipeline_degree = 1;
  int micro_batches = 1;
  const PipelineOrder* order = nullptr;  // the schedule's order, replayed where it is not a split backward's
  bool split_backward = false;           // InterleavedZeroBubble: the step floor's first bound alone
  // Memory mode: bytes over the usable memory for a split (blocks per stage), 0 where it fits; empty: time alone.
  std::function<std::int64_t(const std::vector<int>&)> overflow_bytes;
};
// The blocks per stage of that split; empty where it does not lower the floor below `start_blocks'` (time alone), or
// where no split found fits (memory mode).
std::vector<int> balanced_stage_blocks(const ModelSpec& model, const StageBalanceInput& input);

}  // namespace shardplan
