// Pipeline stage partitions: which consecutive blocks each pipeline stage runs — torchtitan's default split (what
// default_pipeline uses), and the split that minimises the slowest stage's time under per-stage memory limits
// (balanced_stage_partition: the start of the pipeline search's balanced split, Note [Balanced stage split] in
// stage_balance.h, which the torchtitan export writes as [parallelism] module_fqns_per_model_part).
#pragma once

#include <cstdint>
#include <vector>

#include "model_spec.h"
#include "wrapping.h"

namespace shardplan {

// Note [Stage partition]: the first stage also runs the embedding and the last the final norm, the output projection
// and the loss; the pipeline runs at its slowest stage (every micro-batch passes every stage), so a split balances
// stage times with those extras counted.
//
// torchtitan's default (torchtitan/distributed/pipeline_parallel.py, generate_llm_fqn_per_model_part): the embedding
// counts as `input_weight` blocks and the head as `output_weight` (job_config's
// pipeline_parallel_first_stage_less_layers / _last_stage_less_layers, default 1 each); the L + input + output
// "effective layers" are dealt evenly, the remainder one each to the first stages, and the first and last stages run
// their share less the weights. Blocks per stage; InputError naming `field` where torchtitan's asserts refuse (more
// stages than effective layers, a weight above the per-stage share).
std::vector<int> torchtitan_stage_blocks(int stages, int blocks, int input_weight, int output_weight,
                                         const char* field);

// The stages' layer ranges in `model` for so many transformer blocks per stage, in order: the layers before the
// first block (the embedding) join the first stage, those after the last block (final norm, head) the last.
// InputError naming `field` when the counts do not add up to the model's blocks or a stage would hold no layer.
std::vector<LayerRange> stage_layer_ranges(const ModelSpec& model, const std::vector<int>& blocks_per_stage,
                                           const char* field);

// The transformer blocks in each of `stages` (layer ranges of `model`), in order.
std::vector<int> stage_block_counts(const ModelSpec& model, const std::vector<LayerRange>& stages);

struct StagePartitionInput {
  std::vector<double> block_s;           // each block's forward + backward time per micro-batch
  double first_extra_s = 0, last_extra_s = 0;  // the embedding's on the first stage; the head's and loss's on the last
  // Memory, optional (empty stage_limit_bytes: unlimited): each block's bytes and the extras', times a stage's
  // multiplier (its micro-batches of activations in flight, Note [Pipeline orders]) for the activation part.
  std::vector<std::int64_t> block_state_bytes, block_activation_bytes;
  std::int64_t first_extra_bytes = 0, last_extra_bytes = 0;
  std::vector<int> in_flight_by_stage;              // per stage
  std::vector<std::int64_t> stage_limit_bytes;      // per stage
};

struct StagePartition {
  bool found = false;             // some split keeps every stage non-empty and within its limit
  std::vector<int> blocks;        // per stage, at least one each
  double slowest_stage_s = 0;     // the bottleneck: the least possible over all such splits (exact)
};

// The contiguous split into `stages` non-empty stages whose slowest stage is fastest (a min-max linear partition by
// dynamic programming over (stage, last block): exact, O(stages × blocks²)); ties: the earliest split points.
StagePartition balanced_stage_partition(const StagePartitionInput& input, int stages);

}  // namespace shardplan
