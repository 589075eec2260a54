// HardwareProfile: the catalog defaults for a cluster, and `shardplan.profile/v1` JSON output and overrides.
#include "hardware_profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "errors.h"
#include "input_limits.h"
#include "intra_node_transport.h"
#include "unmeasured_rates.h"
#include "json_input.h"

namespace shardplan {
namespace {

constexpr std::string_view kProfileSchema = "shardplan.profile/v1";

// Keys calibration writes beside the parameters (fits per collective × group size with residuals, the raw samples,
// the machine and the date: calibration.h's to_json); diagnostics for people, accepted and ignored when applying.
const std::vector<std::string>& reserved_keys() {
  static const std::vector<std::string> keys = {"samples", "residuals", "machine", "date", "fits"};
  return keys;
}

// `known` plus the reserved calibration keys: anything else is a typo and gets a suggestion.
void reject_unknown(const JsonObjectReader& reader, std::vector<std::string> known) {
  known.insert(known.end(), reserved_keys().begin(), reserved_keys().end());
  reader.reject_unknown_keys(known);
}

// fits.collectives (calibration.cpp's to_json): each fit with a positive bandwidth from at least two samples becomes a
// CollectiveFit; fewer samples cannot separate α from β. A later fit of the same cell replaces an earlier one. Every
// field is read typed and in range (a string where a number belongs is an InputError naming it, not an exception).
void read_collective_fits(const JsonObjectReader& fits, HardwareProfile& profile) {
  if (!fits.has("collectives")) return;
  const auto entries = fits.array("collectives", true);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const JsonObjectReader entry = fits.element("collectives", i, entries[i]);
    const std::string collective = entry.optional_string("collective").value_or("");
    if (collective != "all_gather" && collective != "reduce_scatter" && collective != "all_reduce") {
      entry.fail("collective", "all_gather, reduce_scatter or all_reduce");
    }
    // Calibration writes more per fit (residuals, the tier's name); those are for people and ignored here.
    const auto ranks = entry.optional_int_in_range("ranks", 0, limits::kMaxWorldSize).value_or(0);
    const auto samples =
        entry.optional_int_in_range("samples", 0, std::numeric_limits<std::int64_t>::max()).value_or(0);
    const double latency_s =
        entry.optional_number_in_range("latency_s", 0, limits::kLatencyS.most).value_or(0);
    const double bus_bytes_per_s =
        entry.optional_number_in_range("bus_bytes_per_s", 0, limits::kBytesPerS.most).value_or(0);
    HardwareProfile::CollectiveFit fit{collective, static_cast<int>(ranks), entry.boolean("spans_nodes", false),
                                       latency_s, bus_bytes_per_s};
    if (fit.ranks < 2 || samples < 2 || fit.bus_bytes_per_s < limits::kBytesPerS.least) continue;
    auto& fits_list = profile.collective_fits;
    std::erase_if(fits_list, [&](const HardwareProfile::CollectiveFit& other) {
      return other.collective == fit.collective && other.ranks == fit.ranks && other.spans_nodes == fit.spans_nodes;
    });
    fits_list.push_back(fit);
  }
}

// An efficiency is a fraction of a peak: in (0, 1].
void read_fraction(const JsonObjectReader& reader, std::string_view key, double& field) {
  if (!reader.has(key)) return;
  const auto& value = reader.raw().at(std::string(key));
  if (!value.is_number() || !(value.get<double>() > 0.0) || !(value.get<double>() <= 1.0)) {
    reader.fail(key, "a number in (0, 1]");
  }
  field = value.get<double>();
}

void read_tier(const JsonObjectReader& parent, std::string_view key, LinkTier& tier) {
  if (!parent.has(key)) return;
  const auto reader = parent.object(key);
  reject_unknown(reader, {"name", "latency_s", "bus_bytes_per_s", "efficiency"});
  if (const auto name = reader.optional_string("name")) tier.name = *name;
  // α may be zero (a profile that ignores latency), never negative.
  reader.update("latency_s", tier.latency_s, limits::kLatencyS);
  reader.update("bus_bytes_per_s", tier.bus_bytes_per_s, limits::kBytesPerS);
  read_fraction(reader, "efficiency", tier.efficiency);
}

nlohmann::json tier_json(const LinkTier& tier) {
  return {{"name", tier.name},
          {"latency_s", tier.latency_s},
          {"bus_bytes_per_s", tier.bus_bytes_per_s},
          {"efficiency", tier.efficiency}};
}

// Note [Catalog defaults]: where the catalog gives no kernel rate or link efficiency for a device (a user's GPU),
// the profile keeps HardwareProfile's defaults; a fabric without a measured NIC efficiency gets nccl-tests' ≈ 0.95 of
// the line rate per NIC (DGX A100 8 × HDR: 192 GB/s of 200, NVIDIA/nccl#812; NDR: 46-48 GB/s of 50 per NIC,
// NVIDIA/nccl-tests#290).
constexpr double kDefaultNicEfficiency = 0.95;

void set_if_given(double given, double& field) {
  if (given > 0) field = given;
}

}  // namespace

double HardwareProfile::peak_flops_for_bytes(int element_bytes) const {
  // fp32 GEMMs run on the plain FP32 pipes; 16-bit ones on the tensor cores (the catalog's dense bf16 peak).
  if (element_bytes == 4) return peak_fp32_flops;
  if (element_bytes == 2) return peak_bf16_flops;
  if (element_bytes == 1) {
    if (peak_fp8_flops > 0) return peak_fp8_flops;
    throw InputError("precision fp8: the catalog has no float8 tensor-core rate for GPU '" + device +
                     "' (fp8 GEMMs need Hopper, Ada, Blackwell or MI300; expected another --precision, or "
                     "peak_fp8_flops in a --catalog entry)");
  }
  throw InternalError("no peak FLOP/s for " + std::to_string(element_bytes) + "-byte elements (expected 2 or 4)");
}

HardwareProfile profile_from_cluster(const Cluster& cluster) {
  const GpuSpec& gpu = cluster.gpu;
  HardwareProfile profile;
  profile.source = "catalog";
  profile.device = gpu.name;
  profile.gpus_per_node = cluster.gpus_per_node;
  profile.nodes = cluster.nodes;
  profile.peak_bf16_flops = gpu.peak_bf16_flops;
  profile.peak_fp8_flops = gpu.peak_fp8_flops;
  profile.peak_fp16_flops = gpu.peak_fp16_flops;
  profile.peak_fp32_flops = gpu.peak_fp32_flops;
  profile.hbm_bytes_per_s = gpu.hbm_bytes_per_s;
  profile.pcie_bytes_per_s = gpu.pcie_bytes_per_s;
  profile.host_memory_bytes_per_s =
      gpu.host_memory_bytes_per_s_per_node > 0 ? gpu.host_memory_bytes_per_s_per_node : kDefaultHostMemoryBytesPerS;
  profile.context_overhead_bytes = gpu.context_overhead_bytes;
  profile.device_memory_bytes = gpu.memory_bytes;
  set_if_given(gpu.max_compute_efficiency, profile.max_compute_efficiency);
  set_if_given(gpu.half_efficiency_flops, profile.half_efficiency_flops);
  set_if_given(gpu.fp8_compute_efficiency, profile.fp8_compute_efficiency);
  set_if_given(gpu.fp8_half_efficiency_flops, profile.fp8_half_efficiency_flops);
  set_if_given(gpu.attention_forward_efficiency, profile.attention_forward_efficiency);
  set_if_given(gpu.attention_backward_efficiency, profile.attention_backward_efficiency);
  set_if_given(gpu.attention_half_seq_len, profile.attention_half_seq_len);
  // Note [Triton attention]: measured only on A100 (FlashAttention-2 paper, Fig. 4c: 0.44 of FlashAttention-2's
  // plateau); elsewhere that ratio of the device's flash rate. The kernel is HazyResearch's flash_attn_triton.py on the
  // pre-MLIR Triton, which llm-foundry ran as attn_impl: triton (its benchmark tables, benchmarks/published-runs); no
  // published measurement of it on H100 was found. The ratio carries over because both run Ampere-style tensor-core
  // code on Hopper: FlashAttention-2 has no wgmma path (FlashAttention-3 paper, §1), and the pre-MLIR Triton predates
  // Triton's Hopper backend.
  profile.triton_attention_efficiency = gpu.triton_attention_efficiency > 0
                                            ? gpu.triton_attention_efficiency
                                            : 0.44 * profile.attention_forward_efficiency;
  set_if_given(gpu.memory_efficiency, profile.memory_efficiency);
  set_if_given(gpu.clock_fraction, profile.clock_fraction);
  // Note [Overlap slowdown by kernel kind]: the entry's measured kinds, the population average for the rest.
  double gemm = profile.overlap_gemm_slowdown, attention = profile.overlap_attention_slowdown,
         memory = profile.overlap_memory_slowdown;
  set_if_given(gpu.overlap_gemm_slowdown, gemm);
  set_if_given(gpu.overlap_attention_slowdown, attention);
  set_if_given(gpu.overlap_memory_slowdown, memory);
  profile.set_overlap_slowdowns(gemm, attention, memory);
  if (gpu.kernel_dispatch_s >= 0) profile.kernel_dispatch_s = gpu.kernel_dispatch_s;
  profile.nvls_bus_bytes_per_s = gpu.nvls_bus_bytes_per_s;
  profile.collective_base_latency_s = gpu.collective_base_latency_s;
  set_if_given(gpu.comm_half_efficiency_bytes, profile.comm_half_efficiency_bytes);
  // The catalog's intra-node link is per GPU and per direction — what one ring step pushes (nccl-tests' busbw peak);
  // the inter-node tier is the node's whole network, NCCL's rings spread over its rails (Note [Rails]).
  // On PCIe the transport NCCL picks (P2P or SHM) and the link's generation and lanes set it (Note [Intra-node
  // transport] in intra_node_transport.cpp).
  profile.unmeasured_rates = unmeasured_rates(gpu);
  const IntraNodeBus bus = intra_node_bus(gpu);
  profile.intra_node = {bus.name, gpu.intra_node_latency_s, bus.bus_bytes_per_s, bus.efficiency};
  const FabricSpec& fabric = cluster.fabric;
  profile.inter_node = {fabric.name, fabric.latency_s, fabric.node_bytes_per_s(cluster.gpus_per_node),
                        fabric.nic_efficiency > 0 ? fabric.nic_efficiency : kDefaultNicEfficiency};
  return profile;
}

nlohmann::json to_json(const HardwareProfile& profile) {
  return {
      {"schema", std::string(kProfileSchema)},
      {"source", profile.source},
      {"device", profile.device},
      {"gpus_per_node", profile.gpus_per_node},
      {"nodes", profile.nodes},
      {"compute",
       {{"peak_bf16_flops", profile.peak_bf16_flops},
        {"peak_fp16_flops", profile.peak_fp16_flops},
        {"peak_fp32_flops", profile.peak_fp32_flops},
        {"max_compute_efficiency", profile.max_compute_efficiency},
        {"half_efficiency_flops", profile.half_efficiency_flops},
        {"clock_fraction", profile.clock_fraction},
        {"attention_forward_efficiency", profile.attention_forward_efficiency},
        {"attention_backward_efficiency", profile.attention_backward_efficiency},
        {"attention_half_seq_len", profile.attention_half_seq_len},
        {"triton_attention_efficiency", profile.triton_attention_efficiency},
        {"triton_attention_half_seq_len", profile.triton_attention_half_seq_len},
        {"kernel_dispatch_s", profile.kernel_dispatch_s},
        {"hbm_bytes_per_s", profile.hbm_bytes_per_s},
        {"memory_efficiency", profile.memory_efficiency},
        {"elementwise_bytes_per_s", profile.elementwise_bytes_per_s},
        {"pcie_bytes_per_s", profile.pcie_bytes_per_s}}},
      {"communication",
       {{"intra_node", tier_json(profile.intra_node)},
        {"inter_node", tier_json(profile.inter_node)},
        {"comm_half_efficiency_bytes", profile.comm_half_efficiency_bytes},
        {"collective_base_latency_s", profile.collective_base_latency_s},
        {"nvls_bus_bytes_per_s", profile.nvls_bus_bytes_per_s}}},
      {"overlap_gemm_slowdown", profile.overlap_gemm_slowdown},
      {"overlap_attention_slowdown", profile.overlap_attention_slowdown},
      {"overlap_memory_slowdown", profile.overlap_memory_slowdown},
      {"overlap_collective_slowdown", profile.overlap_collective_slowdown},
      {"context_overhead_bytes", profile.context_overhead_bytes},
      {"op_dispatch_overhead_s", profile.op_dispatch_overhead_s},
      {"collective_issue_overhead_s", profile.collective_issue_overhead_s},
  };
}

void HardwareProfile::set_overlap_slowdowns(double gemm, double attention, double memory) {
  overlap_gemm_slowdown = gemm;
  overlap_attention_slowdown = attention;
  overlap_memory_slowdown = memory;
  overlap_compute_slowdown = std::min({gemm, attention, memory});
}

const HardwareProfile::CollectiveFit* HardwareProfile::find_collective_fit(std::string_view collective, int ranks,
                                                                          bool spans_nodes) const {
  for (const CollectiveFit& fit : collective_fits) {
    if (fit.collective == collective && fit.ranks == ranks && fit.spans_nodes == spans_nodes) return &fit;
  }
  return nullptr;
}

HardwareProfile apply_profile_json(HardwareProfile base, const nlohmann::json& document, const std::string& origin) {
  const JsonObjectReader root(document, origin);
  // A profile is only meaningful with its schema: a cluster or plan file given as --profile must not half-apply.
  if (!root.has("schema") || !root.raw().at("schema").is_string() ||
      root.raw().at("schema").get<std::string>() != kProfileSchema) {
    root.fail("schema", "\"" + std::string(kProfileSchema) + "\"");
  }
  reject_unknown(root, {"schema", "source", "device", "gpus_per_node", "nodes", "compute", "communication",
                        "overlap_compute_slowdown", "overlap_gemm_slowdown", "overlap_attention_slowdown",
                        "overlap_memory_slowdown", "overlap_collective_slowdown", "context_overhead_bytes",
                        "op_dispatch_overhead_s", "collective_issue_overhead_s"});

  HardwareProfile profile = std::move(base);
  (void)root.optional_string("source");  // validated, but the file it came from is the source now
  profile.source = origin;
  if (const auto device = root.optional_string("device")) profile.device = *device;
  if (const auto gpus = root.optional_int_in_range("gpus_per_node", 1, limits::kMaxWorldSize)) {
    profile.gpus_per_node = static_cast<int>(*gpus);
  }
  if (const auto nodes = root.optional_int_in_range("nodes", 1, limits::kMaxWorldSize)) {
    profile.nodes = static_cast<int>(*nodes);
  }

  if (root.has("compute")) {
    const auto compute = root.object("compute");
    reject_unknown(compute, {"peak_bf16_flops", "peak_fp16_flops", "peak_fp32_flops", "max_compute_efficiency",
                             "half_efficiency_flops", "clock_fraction", "attention_forward_efficiency",
                             "attention_backward_efficiency", "attention_half_seq_len", "triton_attention_efficiency",
                             "triton_attention_half_seq_len", "kernel_dispatch_s",
                             "hbm_bytes_per_s", "memory_efficiency", "elementwise_bytes_per_s",
                             "pcie_bytes_per_s"});
    compute.update("peak_bf16_flops", profile.peak_bf16_flops, limits::kFlopsPerS);
    compute.update("peak_fp16_flops", profile.peak_fp16_flops, limits::kFlopsPerS);
    compute.update("peak_fp32_flops", profile.peak_fp32_flops, limits::kFlopsPerS);
    read_fraction(compute, "max_compute_efficiency", profile.max_compute_efficiency);
    // The work at which a kernel reaches half its peak: up to a second of the fastest device's.
    compute.update("half_efficiency_flops", profile.half_efficiency_flops, {1, limits::kFlopsPerS.most});
    read_fraction(compute, "clock_fraction", profile.clock_fraction);
    read_fraction(compute, "attention_forward_efficiency", profile.attention_forward_efficiency);
    read_fraction(compute, "attention_backward_efficiency", profile.attention_backward_efficiency);
    compute.update("attention_half_seq_len", profile.attention_half_seq_len, limits::kSeqLenRange);
    read_fraction(compute, "triton_attention_efficiency", profile.triton_attention_efficiency);
    compute.update("triton_attention_half_seq_len", profile.triton_attention_half_seq_len, limits::kSeqLenRange);
    compute.update("kernel_dispatch_s", profile.kernel_dispatch_s, limits::kOverheadS);
    compute.update("hbm_bytes_per_s", profile.hbm_bytes_per_s, limits::kBytesPerS);
    read_fraction(compute, "memory_efficiency", profile.memory_efficiency);
    compute.update("elementwise_bytes_per_s", profile.elementwise_bytes_per_s, {0, limits::kBytesPerS.most});
    compute.update("pcie_bytes_per_s", profile.pcie_bytes_per_s, limits::kBytesPerS);
  }

  if (root.has("communication")) {
    const auto communication = root.object("communication");
    reject_unknown(communication, {"intra_node", "inter_node", "comm_half_efficiency_bytes", "bus_efficiency",
                                   "collective_base_latency_s", "nvls_bus_bytes_per_s"});
    // Profiles written before the tiers carried their own efficiency give one for both; a tier's own wins.
    double both_tiers = 0;
    read_fraction(communication, "bus_efficiency", both_tiers);
    if (both_tiers > 0) profile.intra_node.efficiency = profile.inter_node.efficiency = both_tiers;
    read_tier(communication, "intra_node", profile.intra_node);
    read_tier(communication, "inter_node", profile.inter_node);
    // The message at which a link reaches half its bandwidth: 1 byte to 1 PiB.
    communication.update("comm_half_efficiency_bytes", profile.comm_half_efficiency_bytes,
                         {1, static_cast<double>(limits::kMostMemoryBytes)});
    communication.update("collective_base_latency_s", profile.collective_base_latency_s, limits::kLatencyS);
    communication.update("nvls_bus_bytes_per_s", profile.nvls_bus_bytes_per_s, {0, limits::kBytesPerS.most});
  }

  // A slowdown below 1 would make compute or a collective faster while the other runs beside it. The single
  // "overlap_compute_slowdown" of older profiles (and of calibrated ones: one fitted value) is every kernel kind's;
  // a kind's own key wins (Note [Overlap slowdown by kernel kind]).
  const auto read_slowdown = [&](const char* key, double& slowdown) {
    if (!root.has(key)) return;
    const auto& value = root.raw().at(key);
    if (!value.is_number() || !(value.get<double>() >= 1.0) || !(value.get<double>() <= limits::kMostSlowdown)) {
      root.fail(key, "a number in [1, 100]");
    }
    slowdown = value.get<double>();
  };
  double every_kind = 0;
  read_slowdown("overlap_compute_slowdown", every_kind);
  if (every_kind > 0) profile.set_overlap_slowdown(every_kind);
  double gemm = profile.overlap_gemm_slowdown, attention = profile.overlap_attention_slowdown,
         memory = profile.overlap_memory_slowdown;
  read_slowdown("overlap_gemm_slowdown", gemm);
  read_slowdown("overlap_attention_slowdown", attention);
  read_slowdown("overlap_memory_slowdown", memory);
  profile.set_overlap_slowdowns(gemm, attention, memory);
  read_slowdown("overlap_collective_slowdown", profile.overlap_collective_slowdown);
  profile.context_overhead_bytes = root.optional_int_in_range("context_overhead_bytes", 0, limits::kMostMemoryBytes)
                                       .value_or(profile.context_overhead_bytes);
  // Note [Input limits]: every physical number of a profile in its range, as the catalog's.
  root.update("op_dispatch_overhead_s", profile.op_dispatch_overhead_s, limits::kOverheadS);
  root.update("collective_issue_overhead_s", profile.collective_issue_overhead_s, limits::kOverheadS);
  if (root.has("fits")) read_collective_fits(root.object("fits"), profile);
  return profile;
}

}  // namespace shardplan
