// `estimate`: the per-rank memory breakdown of one configuration, as a result value, JSON and a human table.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cluster.h"
#include "hardware_profile.h"
#include "memory_model.h"
#include "model_spec.h"
#include "sharding.h"
#include "simulator.h"
#include "training.h"
#include "unit_layout.h"
#include "wrapping.h"

namespace shardplan {

struct EstimateRequest {
  ModelSpec model;
  Cluster cluster;
  HardwareProfile profile;
  TrainingConfig training;
  ShardingStrategy strategy;
  Wrapping wrapping;
  std::string units_policy = "per-block";  // how `wrapping` was chosen, for the report
  bool model_states_only = false;
  bool offload_params = false;  // FSDP's CPUOffload(offload_params=True) on the default plan
  double memory_headroom_fraction = 0;  // Note [Memory headroom] (memory_headroom.h)
};

struct EstimateResult {
  EstimateRequest request;
  MemoryEstimate memory;           // breakdown = the simulated peak of the default plan; layout and units as resolved
  SimulationSummary simulation;    // the step the peak was taken from
  std::vector<UnitLayout> layouts;  // the lowering's sizes of the plan's units (their padding), in memory.units' order
  // The one verdict (Note [Memory headroom]): the device peak (reserved + overhead; with --model-states-only the
  // states' total) within the capacity less the headroom.
  std::int64_t headroom_bytes = 0;
  bool fits = false;
};

// Lowers the default plan for the request (FSDP's wrapping, one unit prefetched) and simulates it: the peak memory is
// the schedule's, so `estimate` and `simulate` always agree.
EstimateResult run_estimate(const EstimateRequest& request);

// `shardplan.estimate/v1`: model, cluster, training, strategy, "memory" {<term>_bytes..., total_bytes (allocated),
// reserved_peak_bytes, device_peak_bytes (≥ total_bytes), capacity_bytes, memory_headroom_bytes, fits,
// dominant_term}, params, units [{name, layers, params, padded_params (the elements FSDP holds for the unit after
// padding, UnitLayout::padded_elements: LoRA's adapters included, each dtype group padded on its own under FSDP2,
// QLoRA's 4-bit weights as packed elements), root}].
nlohmann::json to_json(const EstimateResult& result);
std::string render_text(const EstimateResult& result);

}  // namespace shardplan
