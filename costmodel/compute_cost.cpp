// Compute cost: a layer's FLOPs and HBM traffic per pass for one micro-batch, and their roofline × efficiency time.
#include "compute_cost.h"

#include <algorithm>

#include "errors.h"

namespace shardplan {

LayerWork layer_work(const LayerSpec& layer, const TrainingConfig& training, ComputePass pass) {
  const auto tokens = static_cast<double>(training.tokens_per_micro_batch());
  // Flash kernels skip the masked upper triangle of causal attention (FlashAttention-2, §3.1); the eager path
  // (softmax over a materialised s×s score matrix) computes all of it.
  const bool causal_skip = training.flash_attention;
  const double forward_flops = layer.forward_flops_per_token(training.seq_len, causal_skip) * tokens;
  // Note [Activation traffic]: the non-GEMM work (norms, activations, dropout, softmax) is bandwidth-bound and its
  // traffic scales with what the layer keeps for backward, so we charge those bytes — in the compute dtype, as if
  // nothing were checkpointed, since forward and recompute materialise the full set whatever is kept afterwards.
  // Forward and recompute write them once (1×). Backward reads them and writes gradient activations of the same size
  // (2×). Reads of inputs inside fused kernels are not counted: a lower bound, which calibration's memory_efficiency
  // absorbs.
  const double activation_bytes =
      layer.activation_bytes_per_token(training.seq_len, training.precision.param_compute_bytes,
                                       training.flash_attention, ActivationCheckpointing::none) *
      tokens;
  switch (pass) {
    case ComputePass::forward: return {forward_flops, activation_bytes};
    // Backward = 2× forward: weight and input gradients each cost one forward (Narayanan et al. 2021, §5.1).
    case ComputePass::backward: return {2.0 * forward_flops, 2.0 * activation_bytes};
    // Recompute (activation checkpointing) reruns the forward (Korthikanti et al. 2022, §4).
    case ComputePass::recompute: return {forward_flops, activation_bytes};
  }
  throw InternalError("unknown ComputePass " + std::to_string(static_cast<int>(pass)));
}

double compute_time_s(const LayerWork& work, int compute_element_bytes, const HardwareProfile& profile) {
  SHARDPLAN_CHECK(work.flops >= 0 && work.memory_bytes >= 0, "negative FLOPs or bytes in a LayerWork");
  double flop_time_s = 0;
  if (work.flops > 0) {
    const double peak_flops_per_s = profile.peak_flops_for_bytes(compute_element_bytes);
    SHARDPLAN_CHECK(peak_flops_per_s > 0 && profile.max_compute_efficiency > 0, "profile has no compute peak");
    // eff(f) = max_efficiency · f / (f + f½): small GEMMs cannot fill the machine (HardwareProfile; NVIDIA "GPU
    // Performance Background", wave quantisation and tile efficiency).
    const double efficiency =
        profile.max_compute_efficiency * work.flops / (work.flops + profile.half_efficiency_flops);
    flop_time_s = work.flops / (peak_flops_per_s * efficiency);
  }
  double memory_time_s = 0;
  if (work.memory_bytes > 0) {
    SHARDPLAN_CHECK(profile.hbm_bytes_per_s > 0 && profile.memory_efficiency > 0, "profile has no HBM bandwidth");
    memory_time_s = work.memory_bytes / (profile.hbm_bytes_per_s * profile.memory_efficiency);
  }
  // Roofline (Williams, Waterman & Patterson 2009): the slower of the compute and memory bounds.
  return std::max(flop_time_s, memory_time_s);
}

double optimizer_step_time_s(std::int64_t shard_elements, const PrecisionRecipe& precision, OptimizerKind optimizer,
                             const HardwareProfile& profile) {
  SHARDPLAN_CHECK(shard_elements >= 0, "negative shard size " + std::to_string(shard_elements));
  if (shard_elements == 0) return 0;
  SHARDPLAN_CHECK(profile.hbm_bytes_per_s > 0 && profile.memory_efficiency > 0, "profile has no HBM bandwidth");
  // A fused optimizer (apex FusedAdam, torch `fused=True`) touches each byte once per element of the shard:
  // read + write the parameter, read the gradient, read + write the master copy and the states (ZeRO's K bytes).
  // bf16-mixed AdamW: 2·4 + 4 + 2·8 = 28 bytes.
  const double bytes_per_element = 2.0 * precision.param_storage_bytes + precision.grad_storage_bytes +
                                   2.0 * optimizer_bytes_per_param(precision, optimizer);
  return static_cast<double>(shard_elements) * bytes_per_element /
         (profile.hbm_bytes_per_s * profile.memory_efficiency);
}

double buffer_fill_time_s(std::int64_t bytes, const HardwareProfile& profile) {
  SHARDPLAN_CHECK(bytes >= 0, "negative buffer size " + std::to_string(bytes));
  if (bytes == 0) return 0;
  SHARDPLAN_CHECK(profile.hbm_bytes_per_s > 0 && profile.memory_efficiency > 0, "profile has no HBM bandwidth");
  return static_cast<double>(bytes) / (profile.hbm_bytes_per_s * profile.memory_efficiency);
}

double host_copy_time_s(std::int64_t bytes, const HardwareProfile& profile) {
  SHARDPLAN_CHECK(bytes >= 0, "negative copy size " + std::to_string(bytes));
  if (bytes == 0) return 0;
  SHARDPLAN_CHECK(profile.pcie_bytes_per_s > 0, "profile has no PCIe bandwidth");
  // One direction of the host link (the catalog's pcie_bytes_per_s is per direction); pinned-memory copies reach it.
  return static_cast<double>(bytes) / profile.pcie_bytes_per_s;
}

}  // namespace shardplan
