// lower_pipeline: a plan lowered into one program per pipeline rank, and the recv → send cross dependencies
// (Note [Pipeline programs] in pipeline_schedule.h).
#include "pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "context_parallel_lowering.h"
#include "errors.h"
#include "lowerer.h"
#include "optimizer_in_backward.h"
#include "tensor_parallel.h"

namespace shardplan {
namespace {

void check_layout(const PipelineLayout& layout, const ModelSpec& model) {
  if (layout.degree < 1 || layout.stages_per_rank < 1) {
    throw InputError("pipeline: degree and stages_per_rank must be at least 1, got " + std::to_string(layout.degree) +
                     " and " + std::to_string(layout.stages_per_rank));
  }
  if (layout.dims.pp() != layout.degree) {
    throw InputError("pipeline: the layout's degrees have pp " + std::to_string(layout.dims.pp()) +
                     ", expected its degree " + std::to_string(layout.degree));
  }
  const auto stages = static_cast<std::size_t>(layout.degree) * static_cast<std::size_t>(layout.stages_per_rank);
  if (layout.stages.size() != stages) {
    throw InputError("pipeline.stages: expected " + std::to_string(stages) + " layer ranges (pp × stages per rank), got " +
                     std::to_string(layout.stages.size()));
  }
  std::size_t next = 0;
  for (std::size_t stage = 0; stage < stages; ++stage) {
    const LayerRange& range = layout.stages[stage];
    if (range.begin != next || range.end <= range.begin) {
      throw InputError("pipeline.stages[" + std::to_string(stage) + "]: expected a non-empty range starting at layer " +
                       std::to_string(next));
    }
    next = range.end;
  }
  if (next != model.layers.size()) {
    throw InputError("pipeline.stages: the stages end at layer " + std::to_string(next) + ", expected all " +
                     std::to_string(model.layers.size()) + " layers");
  }
  // Note [Tied layers under a pipeline].
  const std::string tie = pipeline_tie(model);
  if (!tie.empty() && stages > 1) {
    throw InputError("pipeline: " + tie + ", and a pipeline puts them on different stages (tied embeddings with "
                     "pipeline parallelism are not modelled; plan it without --pipeline-parallel)");
  }
}

// Note [Split backward lowering]: torchtitan runs the zero-bubble schedules without torch.compile and float8
// ("for Zero Bubble, no torch.compile / async TP / Float8 is used since not compatible", pytorch/torchtitan#773):
// a compiled block's backward is one autograd node, which stage_backward_input cannot split at its weights.
void check_split_backward(const PipelineLayout& layout, const TrainingConfig& training) {
  if (layout.schedule != PipelineScheduleKind::interleaved_zero_bubble) return;
  const std::string schedule = std::string("pipeline: ") + to_string(layout.schedule);
  if (training.torch_compile) {
    throw InputError(schedule + " splits backward at the weights, which a torch.compile'd block's backward cannot "
                     "(pytorch/torchtitan#773); plan it without --compile, or another schedule");
  }
  if (training.precision.uses_fp8()) {
    throw InputError(schedule + " with float8 linears ('" + training.precision.name + "') is not run by torchtitan "
                     "(pytorch/torchtitan#773); expected a bf16 precision, or another schedule");
  }
}

}  // namespace

PipelineBufferBytes pipeline_buffer_bytes(const ModelSpec& model, const TrainingConfig& rank_training,
                                          int tensor_parallel) {
  // Note [Pipeline programs]: one TP rank's boundary is its sequence shard under sequence parallelism.
  const bool sequence_parallel = tensor_parallel > 1 && pytorch_tensor_parallel(tensor_parallel).sequence_parallel;
  const int sequence_shards = sequence_parallel ? tensor_parallel : 1;
  const std::int64_t rows = (rank_training.seq_len + sequence_shards - 1) / sequence_shards;
  const std::int64_t element_bytes = rank_training.precision.param_compute_bytes;
  PipelineBufferBytes bytes;
  bytes.boundary_bytes = rank_training.micro_batch * rows * model.hidden_size * element_bytes;
  // Note [Pipeline buffers]: the logits, every token's row of one TP rank's vocabulary shard (loss parallel: the head's
  // output stays sharded on the vocabulary) in the compute dtype (torchtitan's Transformer.forward returns
  // self.output(h) as is).
  const std::int64_t vocabulary_shard = (model.vocab_size + tensor_parallel - 1) / tensor_parallel;
  bytes.output_bytes = rank_training.micro_batch * rank_training.seq_len * vocabulary_shard * element_bytes;
  return bytes;
}

std::string pipeline_tie(const ModelSpec& model) {
  for (const LayerSpec& layer : model.layers) {
    if (layer.tied_to_layer && *layer.tied_to_layer < model.layers.size()) {
      return "layer '" + layer.name + "' shares its weight with '" + model.layers[*layer.tied_to_layer].name +
             "' (tied embeddings)";
    }
  }
  return "";
}

namespace {

// The stage holding `layer`.
std::size_t stage_of(const std::vector<LayerRange>& stages, std::size_t layer) {
  std::size_t stage = 0;
  while (layer >= stages[stage].end) ++stage;
  return stage;
}

}  // namespace

PipelineLayout pipeline_layout(const Plan& plan, const ParallelDims& dims) {
  PipelineLayout layout;
  layout.schedule = plan.pipeline.schedule;
  layout.degree = plan.pipeline.degree;
  layout.stages_per_rank = plan.pipeline.stages_per_rank;
  layout.stages = plan.pipeline.stages;
  layout.dims = dims;
  return layout;
}

PipelineRankModel pipeline_rank_model(const Plan& plan, const ModelSpec& model, const PipelineLayout& layout,
                                      int rank) {
  check_layout(layout, model);
  if (rank < 0 || rank >= layout.degree) {
    throw InputError("pipeline: rank " + std::to_string(rank) + " outside the " + std::to_string(layout.degree) +
                     " pipeline ranks");
  }
  // The rank's stages (torch's loop placement: r, r + pp, ...), concatenated into one model.
  PipelineRankModel held;
  held.model = model;
  held.model.layers.clear();
  std::vector<LayerRange> units;
  const int stage_count = layout.degree * layout.stages_per_rank;
  for (int stage = rank; stage < stage_count; stage += layout.degree) {
    const LayerRange& range = layout.stages[static_cast<std::size_t>(stage)];
    const std::size_t offset = held.model.layers.size();
    held.stage_starts.push_back(offset);
    for (std::size_t layer = range.begin; layer < range.end; ++layer) {
      held.model.layers.push_back(model.layers[layer]);
      held.whole_layers.push_back(layer);
    }
    for (std::size_t unit = 1; unit < plan.units.size(); ++unit) {
      const LayerRange& unit_range = plan.units[unit].layers;
      if (unit_range.begin >= range.begin && unit_range.end <= range.end) {
        units.push_back({unit_range.begin - range.begin + offset, unit_range.end - range.begin + offset});
      }
    }
  }
  held.plan = plan_with_units(held.model, plan, units, std::vector<bool>(units.size(), true));
  // Per held layer, its whole-model layer's checkpointing: the plan's list is indexed by the whole model's layers.
  held.plan.layer_checkpointing.clear();
  for (const std::size_t layer : held.whole_layers) {
    held.plan.layer_checkpointing.push_back(plan.layer_checkpointing.at(layer));
  }
  held.plan.units[0].reshard_after_forward.enabled = false;
  // plan_with_units gives the root the backward prefetch of the last unit, as a whole model's root holds the head,
  // whose backward runs first. A rank whose root holds only the embedding (the first stage's, without the last)
  // runs the root's backward last: prefetching then would gather the last unit again after the stage's final
  // backward freed it, for nothing, at the end of the step.
  const std::size_t last_layer = held.model.layers.size() - 1;
  const bool root_holds_last = std::none_of(units.begin(), units.end(), [&](const LayerRange& range) {
    return range.begin <= last_layer && last_layer < range.end;
  });
  if (!root_holds_last) held.plan.units[0].backward_prefetch.clear();
  return held;
}

PipelineSchedule lower_pipeline(const Plan& plan, const ModelSpec& model, const LoweringOptions& options,
                                const PipelineLayout& layout) {
  check_layout(layout, model);
  check_split_backward(layout, plan.training);
  check_optimizer_in_backward(plan);  // Note [Optimizer in backward]: refused with a pipeline
  PipelineSchedule pipeline;
  pipeline.order = pipeline_order(layout.schedule, layout.degree, layout.stages_per_rank, plan.grad_accumulation_steps);
  pipeline.stage_layers = layout.stages;
  for (std::size_t unit = 1; unit < plan.units.size(); ++unit) {
    const LayerRange& range = plan.units[unit].layers;
    if (stage_of(layout.stages, range.begin) != stage_of(layout.stages, range.end - 1)) {
      throw InputError("plan.units[" + std::to_string(unit) + "] ('" + plan.units[unit].name + "'): its layers " +
                       std::to_string(range.begin) + ".." + std::to_string(range.end - 1) +
                       " cross a pipeline stage boundary; expected every unit within one stage");
    }
  }
  // Ranks of one stage: data-parallel × tensor-parallel, consecutive in torchtitan's mesh (pp outermost); stage s's
  // first rank is s × that, so two neighbour stages' matching ranks share a node when the node holds both.
  const int tensor_parallel = layout.dims.tp();
  const int stage_ranks = options.world_size * tensor_parallel;
  const auto node_of = [&](int stage) { return stage * stage_ranks / std::max(1, options.gpus_per_node); };

  const int stage_count = pipeline.order.stage_count();
  for (int rank = 0; rank < layout.degree; ++rank) {
    PipelineRankModel held = pipeline_rank_model(plan, model, layout, rank);
    std::vector<lowering_internal::StageSpan> spans;
    for (std::size_t index = 0; index < held.stage_starts.size(); ++index) {
      const int stage = rank + static_cast<int>(index) * layout.degree;
      const LayerRange& range = layout.stages[static_cast<std::size_t>(stage)];
      lowering_internal::StageSpan span;
      span.stage = stage;
      span.first_layer = held.stage_starts[index];
      span.last_layer = held.stage_starts[index] + (range.end - range.begin) - 1;
      span.first = stage == 0;
      span.last = stage + 1 == stage_count;
      span.previous_crosses_nodes = stage > 0 && node_of(stage - 1) != node_of(stage);
      span.next_crosses_nodes = stage + 1 < stage_count && node_of(stage + 1) != node_of(stage);
      spans.push_back(span);
    }
    const ModelSpec& rank_model = held.model;
    // Note [Pipeline programs]: under context parallelism one CP rank's program of its stages (Note
    // [Context-parallel lowering]), passing its rows of each sequence between the stages.
    const bool rings = plan.context_parallel.enabled();
    const Plan rank_plan = rings ? context_parallel_rank_plan(held.plan) : held.plan;
    const std::vector<std::size_t>& stage_starts = held.stage_starts;
    const PipelineBufferBytes buffers = pipeline_buffer_bytes(model, rank_plan.training, tensor_parallel);
    lowering_internal::Lowerer lowerer(rank_plan, rank_model, options, stage_starts);
    if (rings) lowerer.set_ring({plan.context_parallel.degree, plan.training.seq_len});
    StepSchedule program = lowerer.run_actions(pipeline.order.by_rank[static_cast<std::size_t>(rank)], spans,
                                               buffers.boundary_bytes, buffers.output_bytes);
    lowering_internal::finish_lowering(program, rank_plan, rank_model, options.flatten_memory_effects);
    program.parallel = layout.dims;
    pipeline.programs.push_back(std::move(program));
  }

  // Each recv waits for the send of the same micro-batch from its peer stage to its stage.
  using Key = std::tuple<int, int, int>;  // from stage, to stage, micro-batch
  std::map<Key, std::pair<int, int>> sends;
  for (std::size_t program = 0; program < pipeline.programs.size(); ++program) {
    for (const Op& op : pipeline.programs[program].ops) {
      // The pipeline's sends (a ring send of context parallelism has no peer stage).
      if (op.kind == OpKind::send && !is_ring_step(op)) {
        sends[{op.stage, op.peer_stage, op.micro_batch}] = {static_cast<int>(program), op.id};
      }
    }
  }
  for (std::size_t program = 0; program < pipeline.programs.size(); ++program) {
    for (const Op& op : pipeline.programs[program].ops) {
      if (op.kind != OpKind::recv) continue;
      const auto send = sends.find({op.peer_stage, op.stage, op.micro_batch});
      SHARDPLAN_CHECK(send != sends.end(), "a pipeline recv without its send");
      pipeline.cross_dependencies.push_back({static_cast<int>(program), op.id, send->second.first, send->second.second});
    }
  }
  return pipeline;
}

}  // namespace shardplan
