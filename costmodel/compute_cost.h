// Compute cost: layer FLOPs for a micro-batch, and their time under the roofline × efficiency-by-size model.
#pragma once

#include <cstdint>

#include "hardware_profile.h"
#include "model_spec.h"
#include "training.h"

namespace shardplan {

enum class ComputePass { forward, backward, recompute };

struct LayerWork {
  double flops = 0;          // hardware FLOPs of this pass
  double memory_bytes = 0;   // HBM traffic of the pass's non-GEMM work (activations written or read)
};

// Forward FLOPs = forward_flops_per_token × tokens; backward = 2× forward (Narayanan et al. 2021, §5.1: the weight
// and input gradients each cost one forward); recompute = one forward. Memory traffic: the activations the layer keeps
// are written in forward and read back in backward.
LayerWork layer_work(const LayerSpec& layer, const TrainingConfig& training, ComputePass pass);

// max(FLOPs / (peak × efficiency(FLOPs)), bytes / (HBM × memory_efficiency)): a roofline with a size-dependent
// compute efficiency (HardwareProfile).
double compute_time_s(const LayerWork& work, int compute_element_bytes, const HardwareProfile& profile);

// The optimizer step on this rank's shard is bound by HBM bandwidth: it reads and writes parameters and states and
// reads gradients (fused AdamW touches each byte once: apex FusedAdam, torch `fused=True`).
double optimizer_step_time_s(std::int64_t shard_elements, const PrecisionRecipe& precision, OptimizerKind optimizer,
                             const HardwareProfile& profile);

// Zero-filling a fresh buffer (a unit's full-size gradient before its first backward op: the CPU runner's
// value-initialised vector, the GPU runner's cudaMemsetAsync): one streaming write of its bytes at the memory rate,
// like STREAM's fill.
double buffer_fill_time_s(std::int64_t bytes, const HardwareProfile& profile);

// Host ↔ device copy over PCIe (CPU offload).
double host_copy_time_s(std::int64_t bytes, const HardwareProfile& profile);

}  // namespace shardplan
