// Why no plan fits: the dominant memory term of the leanest candidate (GPU memory, or the node's host memory for
// offload) and the cheapest changes that would make a plan fit.
#pragma once

#include <cstdint>

#include "cluster.h"
#include "hardware_profile.h"
#include "model_spec.h"
#include "search.h"

namespace shardplan {

// `smallest`: the candidate with the least GPU peak; `lean_offload`: the leanest CPU-offload plan (full_shard, full
// AC, micro-batch 1, per block) when offload was allowed, else null. When that plan fits the GPU but not the node's
// host memory, host memory is the diagnosis (Note [Host memory]); otherwise the dominant term of `smallest`'s peak.
InfeasibleDiagnosis diagnose(const ModelSpec& model, const Cluster& cluster, const HardwareProfile& profile,
                             const TrainingConfig& training, const PlanCandidate& smallest,
                             const PlanCandidate* lean_offload, std::int64_t cap);

}  // namespace shardplan
