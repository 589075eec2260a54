// Compute cost: each kernel of a pass timed from the profile's kernel rates, and the memory-bound steps around them.
#include "compute_cost.h"

#include <algorithm>

#include "collective_cost.h"
#include "errors.h"

namespace shardplan {
namespace {

// FlashAttention-2 on H100 SXM runs head dimension 64 at 0.89 of its head-dimension-128 rate (FlashAttention-3
// paper, Fig. 5/6, FA2 bars at 16k: forward causal 299 vs 335 TFLOP/s, non-causal 324 vs 370; backward 291 vs 322;
// docs/research/kernel_rates.md §a): fewer FLOPs per byte of Q, K and V loaded.
constexpr double kSmallHeadDimFactor = 0.89;
constexpr std::int64_t kSmallHeadDim = 64;

double tensor_rate(int element_bytes, const HardwareProfile& profile) {
  const double peak = profile.peak_flops_for_bytes(element_bytes);
  SHARDPLAN_CHECK(peak > 0 && profile.max_compute_efficiency > 0 && profile.clock_fraction > 0,
                  "profile has no compute peak");
  return peak * profile.clock_fraction;
}

}  // namespace

double memory_time_s(double bytes, const HardwareProfile& profile) {
  if (bytes <= 0) return 0;
  SHARDPLAN_CHECK(profile.hbm_bytes_per_s > 0 && profile.memory_efficiency > 0, "profile has no HBM bandwidth");
  return bytes / (profile.hbm_bytes_per_s * profile.memory_efficiency);
}

double elementwise_time_s(double bytes, const HardwareProfile& profile) {
  if (bytes <= 0) return 0;
  return profile.elementwise_bytes_per_s > 0 ? bytes / profile.elementwise_bytes_per_s : memory_time_s(bytes, profile);
}

double gemm_time_s(const GemmCall& gemm, int element_bytes, const HardwareProfile& profile) {
  const double flops = gemm.flops();
  if (flops <= 0) return 0;
  // (F + f½) / R: the plateau rate R with a fixed cost of f½ / R per kernel (wave quantisation, prologue and tail),
  // fitted with R on XLA's measured H100 table (XLA default_matmul_perf_table, sm_90: R = 0.79 of peak, f½ = 4.8
  // GFLOP ≈ 6 µs; rms error 6% over its GEMMs of m ≥ 1024, n, k ≥ 512; docs/research/xla_gemm_table.md).
  // Float8 GEMMs at their own measured plateau and fixed cost where the profile has them (HardwareProfile).
  const bool fp8 = element_bytes == 1 && profile.fp8_compute_efficiency > 0;
  const double efficiency = fp8 ? profile.fp8_compute_efficiency : profile.max_compute_efficiency;
  const double half_flops = fp8 && profile.fp8_half_efficiency_flops > 0 ? profile.fp8_half_efficiency_flops
                                                                         : profile.half_efficiency_flops;
  const double rate = tensor_rate(element_bytes, profile) * efficiency;
  const double compute_s = (flops + half_flops) / rate;
  // A GEMM with a short dimension moves more bytes than it computes on (arithmetic intensity 1/(1/m + 1/n + 1/k)
  // FLOP per element): then A, B and C stream at the memory rate (the roofline, Williams, Waterman & Patterson 2009).
  const double m = static_cast<double>(gemm.m), n = static_cast<double>(gemm.n), k = static_cast<double>(gemm.k);
  const double bytes = gemm.batch * element_bytes * (m * k + k * n + m * n);
  return std::max(compute_s, memory_time_s(bytes, profile));
}

double attention_rate_share(const AttentionCall& attention, const HardwareProfile& profile) {
  SHARDPLAN_CHECK(profile.attention_half_seq_len > 0, "profile has no attention rate");
  // s / (s + s½): short sequences leave a flash kernel's tiles underfilled (FlashAttention-2/3 benchmarks rise with
  // sequence length at a fixed token count; HardwareProfile::attention_half_seq_len).
  const auto s = static_cast<double>(attention.seq_len);
  const double half = attention.triton ? profile.triton_attention_half_seq_len : profile.attention_half_seq_len;
  const double length_share = s / (s + half);
  return length_share * (attention.head_dim <= kSmallHeadDim ? kSmallHeadDimFactor : 1.0);
}

double attention_time_s(const AttentionCall& attention, int element_bytes, const HardwareProfile& profile) {
  if (attention.flops <= 0) return 0;
  const double plateau = attention.triton     ? profile.triton_attention_efficiency
                         : attention.backward ? profile.attention_backward_efficiency
                                              : profile.attention_forward_efficiency;
  SHARDPLAN_CHECK(plateau > 0, "profile has no attention rate");
  return attention.flops / (tensor_rate(element_bytes, profile) * plateau * attention_rate_share(attention, profile));
}

PassTime pass_time(const PassKernels& kernels, int compute_element_bytes, const HardwareProfile& profile) {
  PassTime time;
  // Float8 GEMMs (Note [Float8 training]) at the fp8 peak, with the same plateau and fixed cost as the 16-bit ones
  // (an assumption: no fp8 GEMM-by-shape table is cited here), operands of 1 byte.
  for (const GemmCall& gemm : kernels.gemms) {
    time.gemm_s += gemm_time_s(gemm, gemm.fp8 ? 1 : compute_element_bytes, profile);
  }
  for (const AttentionCall& call : kernels.attention) {
    time.attention_s += attention_time_s(call, compute_element_bytes, profile);
  }
  time.memory_s = elementwise_time_s(kernels.memory_bytes, profile);
  // Note [Tensor-parallel collectives] (kernel_spec.h): a TP group stays within a node, the α-β ring model of
  // collective_cost.h on the intra-node link; the next kernel waits for each.
  for (const ActivationCollectiveCall& call : kernels.collectives) {
    const CollectiveKind kind = call.kind == ActivationCollective::all_gather       ? CollectiveKind::all_gather
                                : call.kind == ActivationCollective::reduce_scatter ? CollectiveKind::reduce_scatter
                                                                                    : CollectiveKind::all_reduce;
    time.collective_s += collective_cost(kind, call.bytes, GroupPlacement{call.ranks, false, call.ranks}, profile).time_s;
  }
  time.dispatch_s = kernels.kernel_count() * profile.kernel_dispatch_s;
  // Kernels on one stream add up; the device idles only when the host cannot launch them as fast as they run.
  time.total_s = std::max(time.gemm_s + time.attention_s + time.memory_s + time.collective_s, time.dispatch_s);
  return time;
}

double pass_time_s(const PassKernels& kernels, int compute_element_bytes, const HardwareProfile& profile) {
  return pass_time(kernels, compute_element_bytes, profile).total_s;
}

double optimizer_step_time_s(std::int64_t shard_elements, const PrecisionRecipe& precision, OptimizerKind optimizer,
                             const HardwareProfile& profile) {
  SHARDPLAN_CHECK(shard_elements >= 0, "negative shard size " + std::to_string(shard_elements));
  if (shard_elements == 0) return 0;
  // A fused optimizer (apex FusedAdam, torch `fused=True`) touches each byte once per element of the shard:
  // read + write the parameter, read the gradient, read + write the master copy and the states (ZeRO's K bytes).
  // bf16-mixed AdamW: 2·4 + 4 + 2·8 = 28 bytes.
  // 8-bit states (Note [8-bit optimizers]): their bytes and absmax values, read and written the same way.
  const double bytes_per_element = 2.0 * precision.param_storage_bytes + precision.grad_storage_bytes +
                                   2.0 * optimizer_held_bytes_per_element(precision, optimizer);
  return memory_time_s(static_cast<double>(shard_elements) * bytes_per_element, profile);
}

double buffer_fill_time_s(std::int64_t bytes, const HardwareProfile& profile) {
  SHARDPLAN_CHECK(bytes >= 0, "negative buffer size " + std::to_string(bytes));
  return memory_time_s(static_cast<double>(bytes), profile);
}

double host_copy_time_s(std::int64_t bytes, const HardwareProfile& profile) {
  SHARDPLAN_CHECK(bytes >= 0, "negative copy size " + std::to_string(bytes));
  if (bytes == 0) return 0;
  SHARDPLAN_CHECK(profile.pcie_bytes_per_s > 0, "profile has no PCIe bandwidth");
  // One direction of the host link (the catalog's pcie_bytes_per_s is per direction); pinned-memory copies reach it.
  return static_cast<double>(bytes) / profile.pcie_bytes_per_s;
}

}  // namespace shardplan
