// Unmeasured rates: which catalog constants are defaults rather than published measurements, and how outputs say so.
#include "unmeasured_rates.h"

#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "intra_node_transport.h"

namespace shardplan {

std::vector<std::string> unmeasured_rates(const GpuSpec& gpu) {
  std::vector<std::string> names;
  if (gpu.max_compute_efficiency <= 0) names.push_back("gemm");
  // Float8 GEMMs without their own fit borrow the bf16 plateau (HardwareProfile::fp8_compute_efficiency).
  if (gpu.peak_fp8_flops > 0 && gpu.fp8_compute_efficiency <= 0) names.push_back("fp8_gemm");
  if (gpu.attention_forward_efficiency <= 0) names.push_back("attention");
  if (gpu.memory_efficiency <= 0) names.push_back("memory_bandwidth");
  const auto transport = parse_intra_node_transport(gpu.intra_node_transport);
  const bool pcie = transport && *transport != IntraNodeTransport::nvlink && gpu.pcie_generation > 0;
  if (!pcie && gpu.intra_node_bus_efficiency <= 0) names.push_back("intra_node_busbw");
  return names;
}

nlohmann::json unmeasured_rates_json(const HardwareProfile& profile) {
  return profile.source == "catalog" ? nlohmann::json(profile.unmeasured_rates) : nlohmann::json::array();
}

std::string unmeasured_rates_line(const HardwareProfile& profile) {
  if (profile.source != "catalog" || profile.unmeasured_rates.empty()) return "";
  std::string names;
  for (const auto& name : profile.unmeasured_rates) names += (names.empty() ? "" : ", ") + name;
  return "unmeasured on " + profile.device + ": " + names +
         " (no published kernel measurement; the cost model's defaults stand in — `shardplan calibrate` measures "
         "them)\n";
}

}  // namespace shardplan
