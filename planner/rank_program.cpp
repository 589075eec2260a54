// lower_rank_program (Note [Rank program] in rank_program.h): a rank's program, model and units from its plan.
#include "rank_program.h"

#include "lowering.h"
#include "pipeline_schedule.h"
#include "tensor_parallel_view.h"

namespace shardplan {

RankProgram lower_rank_program(const Plan& plan, const ModelSpec& model, const ParallelDims& dims, int gpus_per_node,
                               int rank, const std::function<void(const RankProgram&)>& check_before_lowering) {
  RankProgram program;
  program.dims = dims;
  program.placement = dims.placement(rank);
  const int world_size = dims.world_size();
  if (dims.pp() > 1) {
    // Note [Pipeline programs]: this pipeline rank's program, over its stages' layers and units.
    const DataParallelView view = data_parallel_view(plan, model, dims, gpus_per_node);
    const PipelineLayout pipeline = pipeline_layout(plan, dims);
    const int pipeline_rank = program.placement.coordinates.pp;
    PipelineRankModel held = pipeline_rank_model(view.plan, view.model, pipeline, pipeline_rank);
    program.model = std::move(held.model);
    program.plan = std::move(held.plan);
    program.whole_layers = std::move(held.whole_layers);
    program.gpus_per_node = view.gpus_per_node;
    program.layouts = unit_layouts(program.plan, program.model, dims.data_parallel_world_size(), view.gpus_per_node);
    if (check_before_lowering) check_before_lowering(program);
    PipelineSchedule programs =
        lower_pipeline(view.plan, view.model, {view.world_size(), view.gpus_per_node, 0}, pipeline);
    program.schedule = std::move(programs.programs.at(static_cast<std::size_t>(pipeline_rank)));
    return program;
  }
  program.model = model;
  program.plan = plan;
  program.gpus_per_node = gpus_per_node;
  if (dims.tp() > 1) {
    // Note [2-D mesh]: FSDP alone over world / tp ranks of the TP rank's model, the cost model's (Note [2-D plans]).
    DataParallelView view = data_parallel_view(plan, model, dims, gpus_per_node);
    program.model = std::move(view.model);
    program.plan = std::move(view.plan);
    program.gpus_per_node = view.gpus_per_node;
  }
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) program.whole_layers.push_back(layer);
  program.layouts =
      unit_layouts(program.plan, program.model, dims.data_parallel_world_size(), program.gpus_per_node);
  if (check_before_lowering) check_before_lowering(program);
  // The schedule the simulator times: with TP, the DP group's FSDP ops, the TP collectives in the passes' kernels.
  program.schedule = lower_plan(plan, model, {world_size, gpus_per_node, 0});
  return program;
}

}  // namespace shardplan
