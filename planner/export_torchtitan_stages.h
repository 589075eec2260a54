// The torchtitan export's pipeline stages (Note [Exported pipeline] in export_torchtitan.cpp): the plan's split as
// pipeline_parallel_layers_per_stage where torchtitan's own split gives it, else as module_fqns_per_model_part.
#pragma once

#include <string>
#include <vector>

#include "model_spec.h"
#include "plan.h"

namespace shardplan {

// How the plan's stages are written: pipeline_parallel_layers_per_stage (0: left out) for torchtitan's own split, else
// module_fqns_per_model_part, one list of module FQNs per stage.
struct TorchtitanStages {
  int layers_per_stage = 0;
  std::vector<std::vector<std::string>> module_fqns;  // empty: torchtitan's generate_llm_fqn_per_model_part
};

// For a pipeline plan; InputError, one line, for a schedule torchtitan runs with another stage count per rank or a
// layer torchtitan's model has no module for.
TorchtitanStages torchtitan_stages(const Plan& plan, const ModelSpec& model);

}  // namespace shardplan
