// `estimate`: the per-rank memory breakdown of one configuration, as a result value, JSON and a human table.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cluster.h"
#include "memory_model.h"
#include "model_spec.h"

namespace shardplan {

struct EstimateRequest {
  ModelSpec model;
  Cluster cluster;
  TrainingConfig training;
  ShardingStrategy strategy;
  Wrapping wrapping;
  std::string units_policy = "per-block";  // how `wrapping` was chosen, for the report
  bool model_states_only = false;
};

struct EstimateResult {
  EstimateRequest request;
  MemoryEstimate memory;
};

EstimateResult run_estimate(const EstimateRequest& request);

// `shardplan.estimate/v1`: model, cluster, training, strategy, "memory" {<term>_bytes..., total_bytes,
// capacity_bytes, fits, dominant_term}, params.
nlohmann::json to_json(const EstimateResult& result);
std::string render_text(const EstimateResult& result);

}  // namespace shardplan
