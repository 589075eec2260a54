// Which of a profile's kernel and link rates no published measurement backs for its GPU: the cost model's defaults
// stand in for them, and plan/estimate/simulate say so in their text and JSON ("unmeasured_rates").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardplan {

struct GpuSpec;
struct HardwareProfile;

// The rates a catalog GPU leaves at HardwareProfile's defaults, by name: "gemm" (max_compute_efficiency), "fp8_gemm"
// (a GPU with float8 tensor cores without fp8_compute_efficiency: its fp8 GEMMs at the bf16 plateau),
// "attention" (attention_forward_efficiency), "memory_bandwidth" (memory_efficiency), "intra_node_busbw" (an NVLink
// entry without a measured bus efficiency; a PCIe entry's comes from its transport, Note [Intra-node transport]).
std::vector<std::string> unmeasured_rates(const GpuSpec& gpu);

// For output: the profile's list (empty once a calibration file was applied: its fits are measurements), as a JSON
// array and as one line of text ("" when every rate is measured).
nlohmann::json unmeasured_rates_json(const HardwareProfile& profile);
std::string unmeasured_rates_line(const HardwareProfile& profile);

}  // namespace shardplan
