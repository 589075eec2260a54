// torchtitan_stages (Note [Exported pipeline] in export_torchtitan.cpp).
#include "export_torchtitan_stages.h"

#include <cstddef>

#include "errors.h"

namespace shardplan {

namespace {

[[noreturn]] void refuse(const std::string& why) { throw InputError(std::string("--export torchtitan: ") + why); }

int blocks_of(const ModelSpec& model) {
  int blocks = 0;
  for (const LayerSpec& layer : model.layers) blocks += layer.kind == LayerKind::transformer_block ? 1 : 0;
  return blocks;
}

// torchtitan's llama3 and qwen3 modules (torchtitan/models/llama3/model/model.py Transformer: tok_embeddings,
// layers.<i>, norm, output), one per layer of the model.
std::vector<std::vector<std::string>> stage_module_fqns(const PipelinePolicy& pipeline, const ModelSpec& model) {
  std::vector<std::vector<std::string>> stages;
  std::vector<int> block_index(model.layers.size(), -1);
  int blocks = 0;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    if (model.layers[layer].kind == LayerKind::transformer_block) block_index[layer] = blocks++;
  }
  for (const LayerRange& range : pipeline.stages) {
    std::vector<std::string> fqns;
    for (std::size_t layer = range.begin; layer < range.end; ++layer) {
      switch (model.layers[layer].kind) {
        case LayerKind::embedding: fqns.push_back("tok_embeddings"); break;
        case LayerKind::transformer_block: fqns.push_back("layers." + std::to_string(block_index[layer])); break;
        case LayerKind::norm: fqns.push_back("norm"); break;
        case LayerKind::lm_head: fqns.push_back("output"); break;
        case LayerKind::other:
          refuse("layer '" + model.layers[layer].name + "' has no module in torchtitan's model to place on a stage");
      }
    }
    stages.push_back(std::move(fqns));
  }
  return stages;
}

}  // namespace

TorchtitanStages torchtitan_stages(const Plan& plan, const ModelSpec& model) {
  const PipelinePolicy& pipeline = plan.pipeline;
  const bool single_stage = pipeline.schedule == PipelineScheduleKind::gpipe ||
                            pipeline.schedule == PipelineScheduleKind::one_f_one_b;
  const std::string schedule = to_string(pipeline.schedule);
  // build_pipeline_schedule hands a single-stage schedule its rank's first stage only (`stages[0]`).
  if (single_stage != (pipeline.stages_per_rank == 1)) {
    refuse("pipeline schedule " + schedule + " with " + std::to_string(pipeline.stages_per_rank) +
           " stages per rank, but torchtitan runs GPipe and 1F1B with 1 stage per rank and the looped schedules "
           "with 2 or more");
  }
  const int stages = pipeline.degree * pipeline.stages_per_rank;
  if (default_pipeline(model, pipeline.degree, pipeline.schedule, pipeline.stages_per_rank).stages ==
      pipeline.stages) {
    // The embedding and head weigh one block each (pipeline_parallel_first/last_stage_less_layers, default 1).
    const int effective = blocks_of(model) + 2;
    const int per_stage = (effective + stages - 1) / stages;
    if ((effective + per_stage - 1) / per_stage == stages) return {per_stage, {}};
    if (pipeline.stages_per_rank == (single_stage ? 1 : 2)) return {};  // torchtitan's default count
  }
  return {0, stage_module_fqns(pipeline, model)};
}

}  // namespace shardplan
