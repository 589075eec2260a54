// HardwareCatalog: case-insensitive lookup with suggestions, user catalog merging (`shardplan.catalog/v1`), JSON output.
#include "hardware_catalog.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>

#include "errors.h"
#include "input_limits.h"
#include "intra_node_transport.h"
#include "json_input.h"
#include "name_suggest.h"

namespace shardplan {
namespace {

constexpr std::string_view kCatalogSchema = "shardplan.catalog/v1";

// Note [Defaults for a new GPU]: a user GPU must give the three numbers nothing else can stand in for (memory, bf16
// peak, memory bandwidth). The rest default to a plain PCIe card: fp16 = bf16 (every tensor-core generation runs them at
// the same rate), fp32 = bf16 / 16 (A100: 312 / 19.5; H100 SXM: 989 / 67 ≈ 15), peers over PCIe Gen4 x16 (32 GB/s per
// direction, α 5 µs), 100 GbE between nodes, 8 per node, free, and the same ~1 GiB runtime context as builtin GPUs.
constexpr double kDefaultPcieBytesPerS = 32e9;       // PCIe Gen4 x16, 64 GB/s bidirectional / 2
constexpr double kDefaultPcieLatencyS = 5e-6;        // as the builtin PCIe cards (gpu_catalog_data.cpp)
constexpr double kFp32PerBf16 = 1.0 / 16.0;          // see Note [Defaults for a new GPU]
constexpr std::int64_t kDefaultContextOverheadBytes = std::int64_t{1} << 30;
constexpr double kDefaultFabricLatencyS = 10e-6;     // between InfiniBand (~5 µs) and TCP Ethernet (~20 µs)

// Bounds that catch unit mistakes (memory_gib given in bytes) before they overflow integers.
constexpr double kMaxMemoryGib = 1 << 20;  // 1 PiB per device
constexpr std::int64_t kMaxGpusPerNode = 1'000'000;

std::string lowercase(std::string_view text) {
  std::string result(text);
  for (auto& c : result) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return result;
}

bool same_name(std::string_view a, std::string_view b) { return lowercase(a) == lowercase(b); }

template <typename Spec>
Spec* find_by_name(std::vector<Spec>& specs, std::string_view name) {
  for (auto& spec : specs) {
    if (same_name(spec.name, name)) return &spec;
  }
  return nullptr;
}

template <typename Spec>
const Spec* find_by_name(const std::vector<Spec>& specs, std::string_view name) {
  return find_by_name(const_cast<std::vector<Spec>&>(specs), name);
}

// did_you_mean ranks by edit distance, which misses the commonest typo, a shortened name ("H100" is 2 edits from
// "B200" but 5 from "H100-80GB"). Names that extend what was typed (or that it extends) are offered alone when there are
// any; otherwise the closest by edit distance.
std::string suggest(const std::string& wanted, const std::vector<std::string>& known) {
  const std::string typed = lowercase(wanted);
  std::vector<std::string> names;
  for (const auto& name : known) {
    const std::string candidate = lowercase(name);
    if (!typed.empty() && (candidate.starts_with(typed) || typed.starts_with(candidate))) names.push_back(name);
  }
  if (names.empty()) names = closest_names(wanted, known);
  if (names.empty()) return "";
  names.resize(std::min<std::size_t>(names.size(), 3));
  std::string text = " (did you mean ";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) text += (i + 1 == names.size()) ? " or " : ", ";
    text += "'" + names[i] + "'";
  }
  return text + "?)";
}

// Names appear in cluster strings ("4x8xNAME"), so they must not look like a count or contain spaces.
std::string checked_name(const JsonObjectReader& entry) {
  const std::string name = entry.string("name");
  const unsigned char first = static_cast<unsigned char>(name.front());
  const bool has_space = std::any_of(name.begin(), name.end(), [](unsigned char c) { return std::isspace(c) != 0; });
  if (std::isdigit(first) || first == '-' || first == '+' || has_space) {
    entry.fail("name", "a name without spaces that does not start with a digit or sign (it appears in '8xNAME')");
  }
  return name;
}

void require_for_new(const JsonObjectReader& entry, std::string_view kind, const std::string& name,
                     std::string_view key, std::string_view alternative = "") {
  if (entry.has(key) || (!alternative.empty() && entry.has(alternative))) return;
  const std::string either = alternative.empty() ? "" : " (or '" + std::string(alternative) + "')";
  throw InputError(entry.origin() + ": missing field '" + entry.field_path(key) + "'" + either + ": a new " +
                   std::string(kind) + " '" + name + "' must give it (only entries that override a known name may " +
                   "leave it out)");
}

void set_string(const JsonObjectReader& entry, std::string_view key, std::string& field) {
  if (const auto value = entry.optional_string(key)) field = *value;
}

}  // namespace

void apply_host_memory_fields(const JsonObjectReader& entry, std::int64_t& bytes_per_node) {
  if (entry.has("host_memory_bytes_per_node") && entry.has("host_memory_gib_per_node")) {
    entry.fail("host_memory_gib_per_node", "only one of 'host_memory_bytes_per_node' and 'host_memory_gib_per_node'");
  }
  if (const auto bytes = entry.optional_int_in_range("host_memory_bytes_per_node", 1, limits::kMostMemoryBytes)) {
    bytes_per_node = *bytes;
  }
  if (const auto gib = entry.optional_positive_number("host_memory_gib_per_node")) {
    if (*gib > kMaxMemoryGib) entry.fail("host_memory_gib_per_node", "a size in GiB (below 1048576), not in bytes");
    bytes_per_node = std::llround(*gib * static_cast<double>(std::int64_t{1} << 30));
  }
}

namespace {

// Applies the fields an entry gives to `spec`, leaving the others as they are (an override changes only what it names).
void apply_gpu_fields(const JsonObjectReader& entry, GpuSpec& spec) {
  set_string(entry, "description", spec.description);
  if (entry.has("memory_bytes") && entry.has("memory_gib")) {
    entry.fail("memory_gib", "only one of 'memory_bytes' and 'memory_gib'");
  }
  if (const auto bytes = entry.optional_int_in_range("memory_bytes", 1, limits::kMostMemoryBytes)) {
    spec.memory_bytes = *bytes;
  }
  if (const auto gib = entry.optional_positive_number("memory_gib")) {
    if (*gib > kMaxMemoryGib) entry.fail("memory_gib", "a size in GiB (below 1048576), not in bytes");
    spec.memory_bytes = std::llround(*gib * static_cast<double>(std::int64_t{1} << 30));
  }
  entry.update("peak_bf16_flops", spec.peak_bf16_flops, limits::kFlopsPerS);
  entry.update("peak_fp16_flops", spec.peak_fp16_flops, limits::kFlopsPerS);
  entry.update("peak_fp32_flops", spec.peak_fp32_flops, limits::kFlopsPerS);
  entry.update("peak_fp8_flops", spec.peak_fp8_flops, limits::kFlopsPerS);
  entry.update("hbm_bytes_per_s", spec.hbm_bytes_per_s, limits::kBytesPerS);
  set_string(entry, "intra_node_link", spec.intra_node_link);
  entry.update("intra_node_bytes_per_s", spec.intra_node_bytes_per_s, limits::kBytesPerS);
  entry.update("intra_node_latency_s", spec.intra_node_latency_s, limits::kLatencyS);
  if (const auto transport = entry.optional_string("intra_node_transport")) {
    if (!parse_intra_node_transport(*transport)) entry.fail("intra_node_transport", "\"nvlink\", \"pcie-p2p\" or \"pcie-shm\"");
    spec.intra_node_transport = to_string(*parse_intra_node_transport(*transport));
  }
  if (const auto generation = entry.optional_int_in_range("pcie_generation", 1, 6)) {
    spec.pcie_generation = static_cast<int>(*generation);
  }
  if (const auto lanes = entry.optional_int_in_range("pcie_lanes", 1, 32)) spec.pcie_lanes = static_cast<int>(*lanes);
  entry.update("pcie_bytes_per_s", spec.pcie_bytes_per_s, limits::kBytesPerS);
  set_string(entry, "default_fabric", spec.default_fabric);
  if (const auto count = entry.optional_positive_int("default_gpus_per_node")) {
    if (*count > kMaxGpusPerNode) entry.fail("default_gpus_per_node", "a positive integer up to 1000000");
    spec.default_gpus_per_node = static_cast<int>(*count);
  }
  // Zero is meaningful for these two: hardware one already owns costs nothing per hour, and a calibrated context may
  // be negligible.
  // Note [Input limits]: every physical number in its range, so no step time, speed-up or cost leaves a double's
  // finite range (a peak of 1e-300 FLOP/s printed "step_time_s": null, a price of 1e308 -nan speed-ups).
  entry.update("price_per_gpu_hour", spec.price_per_gpu_hour, {0, limits::kMostPricePerGpuHour});
  spec.context_overhead_bytes = entry.optional_int_in_range("context_overhead_bytes", 0, limits::kMostMemoryBytes)
                                    .value_or(spec.context_overhead_bytes);
  // Kernel-level rates (the op-level compute model): fractions of a peak, a FLOP count, a length and a host time.
  entry.update("max_compute_efficiency", spec.max_compute_efficiency, limits::kFraction);
  entry.update("half_efficiency_flops", spec.half_efficiency_flops, {1, limits::kFlopsPerS.most});
  entry.update("fp8_compute_efficiency", spec.fp8_compute_efficiency, limits::kFraction);
  entry.update("fp8_half_efficiency_flops", spec.fp8_half_efficiency_flops, {1, limits::kFlopsPerS.most});
  entry.update("attention_forward_efficiency", spec.attention_forward_efficiency, limits::kFraction);
  entry.update("attention_backward_efficiency", spec.attention_backward_efficiency, limits::kFraction);
  entry.update("attention_half_seq_len", spec.attention_half_seq_len, limits::kSeqLenRange);
  entry.update("triton_attention_efficiency", spec.triton_attention_efficiency, limits::kFraction);
  entry.update("memory_efficiency", spec.memory_efficiency, limits::kFraction);
  entry.update("clock_fraction", spec.clock_fraction, limits::kFraction);
  // Overlap slowdowns: below 1 a collective would speed compute up. The single key first, a kind's own wins.
  const limits::Range slowdowns{1, limits::kMostSlowdown};
  double every_kind = 0;
  entry.update("overlap_compute_slowdown", every_kind, slowdowns);
  if (every_kind > 0) {
    spec.overlap_gemm_slowdown = spec.overlap_attention_slowdown = spec.overlap_memory_slowdown = every_kind;
  }
  entry.update("overlap_gemm_slowdown", spec.overlap_gemm_slowdown, slowdowns);
  entry.update("overlap_attention_slowdown", spec.overlap_attention_slowdown, slowdowns);
  entry.update("overlap_memory_slowdown", spec.overlap_memory_slowdown, slowdowns);
  entry.update("kernel_dispatch_s", spec.kernel_dispatch_s, limits::kOverheadS);
  entry.update("intra_node_bus_efficiency", spec.intra_node_bus_efficiency, limits::kFraction);
  entry.update("nvls_bus_bytes_per_s", spec.nvls_bus_bytes_per_s, limits::kBytesPerS);
  entry.update("collective_base_latency_s", spec.collective_base_latency_s, limits::kLatencyS);
  entry.update("comm_half_efficiency_bytes", spec.comm_half_efficiency_bytes,
               {1, static_cast<double>(limits::kMostMemoryBytes)});
  apply_host_memory_fields(entry, spec.host_memory_bytes_per_node);
  // Note [CPU optimizer step] (host_optimizer.h): a node whose host is not the catalog's reference system.
  entry.update("host_memory_bytes_per_s_per_node", spec.host_memory_bytes_per_s_per_node, limits::kBytesPerS);
}

GpuSpec new_gpu(const JsonObjectReader& entry, const std::string& name) {
  require_for_new(entry, "GPU", name, "memory_bytes", "memory_gib");
  require_for_new(entry, "GPU", name, "peak_bf16_flops");
  require_for_new(entry, "GPU", name, "hbm_bytes_per_s");
  GpuSpec spec;
  spec.name = name;
  spec.description = name;
  spec.intra_node_link = "PCIe Gen4 x16";
  spec.intra_node_bytes_per_s = kDefaultPcieBytesPerS;
  spec.intra_node_latency_s = kDefaultPcieLatencyS;
  spec.pcie_bytes_per_s = kDefaultPcieBytesPerS;
  spec.default_fabric = "ethernet-100g";
  spec.default_gpus_per_node = 8;
  spec.price_per_gpu_hour = 0;
  spec.context_overhead_bytes = kDefaultContextOverheadBytes;
  apply_gpu_fields(entry, spec);
  if (!entry.has("peak_fp16_flops")) spec.peak_fp16_flops = spec.peak_bf16_flops;
  if (!entry.has("peak_fp32_flops")) spec.peak_fp32_flops = spec.peak_bf16_flops * kFp32PerBf16;
  return spec;
}

void apply_fabric_fields(const JsonObjectReader& entry, FabricSpec& spec) {
  set_string(entry, "description", spec.description);
  entry.update("bytes_per_s_per_gpu", spec.bytes_per_s_per_gpu, limits::kBytesPerS);
  entry.update("latency_s", spec.latency_s, limits::kLatencyS);
  if (const auto nics = entry.optional_int_in_range("nics_per_node", 1, limits::kMaxNicsPerNode)) {
    spec.nics_per_node = static_cast<int>(*nics);
  }
  entry.update("bytes_per_s_per_nic", spec.bytes_per_s_per_nic, limits::kBytesPerS);
  entry.update("nic_efficiency", spec.nic_efficiency, limits::kFraction);
}

std::vector<std::string> gpu_keys() {
  return {"name", "description", "memory_bytes", "memory_gib", "peak_bf16_flops", "peak_fp16_flops",
          "peak_fp32_flops", "peak_fp8_flops", "hbm_bytes_per_s", "intra_node_link", "intra_node_bytes_per_s", "intra_node_latency_s",
          "intra_node_transport", "pcie_generation", "pcie_lanes", "pcie_bytes_per_s", "default_fabric", "default_gpus_per_node", "price_per_gpu_hour",
          "context_overhead_bytes", "max_compute_efficiency", "half_efficiency_flops", "fp8_compute_efficiency",
          "fp8_half_efficiency_flops", "attention_forward_efficiency",
          "attention_backward_efficiency", "attention_half_seq_len", "triton_attention_efficiency", "memory_efficiency",
          "clock_fraction", "overlap_compute_slowdown", "overlap_gemm_slowdown", "overlap_attention_slowdown",
          "overlap_memory_slowdown", "kernel_dispatch_s", "intra_node_bus_efficiency", "nvls_bus_bytes_per_s",
          "collective_base_latency_s", "comm_half_efficiency_bytes", "host_memory_bytes_per_node",
          "host_memory_gib_per_node", "host_memory_bytes_per_s_per_node"};
}

std::vector<std::string> fabric_keys() {
  return {"name", "description", "bytes_per_s_per_gpu", "latency_s", "nics_per_node", "bytes_per_s_per_nic",
          "nic_efficiency"};
}

}  // namespace

void HardwareCatalog::merge_user_file(const std::string& path) { merge_user_json(read_json_file(path), path); }

void HardwareCatalog::merge_user_json(const nlohmann::json& document, const std::string& origin) {
  merge_user_json(document, origin, "");
}

void HardwareCatalog::merge_user_json(const nlohmann::json& document, const std::string& origin,
                                      const std::string& field_path) {
  const JsonObjectReader root(document, origin, field_path);
  root.reject_unknown_keys({"schema", "description", "gpus", "fabrics"});
  // The schema is optional (an inline catalog rarely carries one) but a different one means a different document.
  if (root.has("schema") && (!root.raw().at("schema").is_string() ||
                              root.raw().at("schema").get<std::string>() != kCatalogSchema)) {
    root.fail("schema", "\"" + std::string(kCatalogSchema) + "\"");
  }

  // Merge into a copy so a bad entry leaves this catalog unchanged. Fabrics first: a new GPU may name a new fabric.
  HardwareCatalog merged = *this;
  const auto fabric_entries = root.has("fabrics") ? root.array("fabrics", true) : std::vector<nlohmann::json>{};
  for (std::size_t i = 0; i < fabric_entries.size(); ++i) {
    const JsonObjectReader entry = root.element("fabrics", i, fabric_entries[i]);
    entry.reject_unknown_keys(fabric_keys());
    const std::string name = checked_name(entry);
    if (FabricSpec* known = find_by_name(merged.fabrics_, name)) {
      apply_fabric_fields(entry, *known);
      continue;
    }
    require_for_new(entry, "fabric", name, "bytes_per_s_per_gpu");
    FabricSpec spec{name, name, 0, kDefaultFabricLatencyS};
    apply_fabric_fields(entry, spec);
    merged.fabrics_.push_back(spec);
  }

  const auto gpu_entries = root.has("gpus") ? root.array("gpus", true) : std::vector<nlohmann::json>{};
  for (std::size_t i = 0; i < gpu_entries.size(); ++i) {
    const JsonObjectReader entry = root.element("gpus", i, gpu_entries[i]);
    entry.reject_unknown_keys(gpu_keys());
    const std::string name = checked_name(entry);
    if (GpuSpec* known = find_by_name(merged.gpus_, name)) {
      apply_gpu_fields(entry, *known);
    } else {
      merged.gpus_.push_back(new_gpu(entry, name));
    }
    // A GPU whose default fabric is unknown would fail later, far from the typo; name it here.
    if (entry.has("default_fabric") && find_by_name(merged.fabrics_, entry.string("default_fabric")) == nullptr) {
      const std::string wanted = entry.string("default_fabric");
      entry.fail("default_fabric", "a known fabric" + suggest(wanted, merged.fabric_names()));
    }
  }
  *this = std::move(merged);
}

const GpuSpec& HardwareCatalog::gpu(const std::string& name) const {
  if (const GpuSpec* spec = find_by_name(gpus_, name)) return *spec;
  throw InputError("unknown GPU '" + name + "'" + suggest(name, gpu_names()) +
                   "; `shardplan gpus` lists the catalog");
}

const FabricSpec& HardwareCatalog::fabric(const std::string& name) const {
  if (const FabricSpec* spec = find_by_name(fabrics_, name)) return *spec;
  throw InputError("unknown fabric '" + name + "'" + suggest(name, fabric_names()) +
                   "; `shardplan gpus` lists the catalog");
}

std::vector<std::string> HardwareCatalog::gpu_names() const {
  std::vector<std::string> names;
  for (const auto& spec : gpus_) names.push_back(spec.name);
  return names;
}

std::vector<std::string> HardwareCatalog::fabric_names() const {
  std::vector<std::string> names;
  for (const auto& spec : fabrics_) names.push_back(spec.name);
  return names;
}

void HardwareCatalog::add_gpu(GpuSpec spec) {
  if (GpuSpec* known = find_by_name(gpus_, spec.name)) {
    *known = std::move(spec);
  } else {
    gpus_.push_back(std::move(spec));
  }
}

void HardwareCatalog::add_fabric(FabricSpec spec) {
  if (FabricSpec* known = find_by_name(fabrics_, spec.name)) {
    *known = std::move(spec);
  } else {
    fabrics_.push_back(std::move(spec));
  }
}

nlohmann::json to_json(const GpuSpec& gpu) {
  nlohmann::json document = {
      {"name", gpu.name},
      {"description", gpu.description},
      {"memory_bytes", gpu.memory_bytes},
      {"peak_bf16_flops", gpu.peak_bf16_flops},
      {"peak_fp16_flops", gpu.peak_fp16_flops},
      {"peak_fp32_flops", gpu.peak_fp32_flops},
      {"hbm_bytes_per_s", gpu.hbm_bytes_per_s},
      {"intra_node_link", gpu.intra_node_link},
      {"intra_node_bytes_per_s", gpu.intra_node_bytes_per_s},
      {"intra_node_latency_s", gpu.intra_node_latency_s},
      {"pcie_bytes_per_s", gpu.pcie_bytes_per_s},
      {"default_fabric", gpu.default_fabric},
      {"default_gpus_per_node", gpu.default_gpus_per_node},
      {"price_per_gpu_hour", gpu.price_per_gpu_hour},
      {"context_overhead_bytes", gpu.context_overhead_bytes},
      {"host_memory_bytes_per_node", gpu.host_memory_bytes_per_node},
  };
  // Kernel rates only where the entry sets them; unset ones are the profile's defaults (and would not read back).
  const std::pair<const char*, double> rates[] = {
      {"max_compute_efficiency", gpu.max_compute_efficiency},
      {"half_efficiency_flops", gpu.half_efficiency_flops},
      {"fp8_compute_efficiency", gpu.fp8_compute_efficiency},
      {"fp8_half_efficiency_flops", gpu.fp8_half_efficiency_flops},
      {"attention_forward_efficiency", gpu.attention_forward_efficiency},
      {"attention_backward_efficiency", gpu.attention_backward_efficiency},
      {"attention_half_seq_len", gpu.attention_half_seq_len},
      {"triton_attention_efficiency", gpu.triton_attention_efficiency},
      {"memory_efficiency", gpu.memory_efficiency},
      {"clock_fraction", gpu.clock_fraction},
      {"overlap_gemm_slowdown", gpu.overlap_gemm_slowdown},
      {"overlap_attention_slowdown", gpu.overlap_attention_slowdown},
      {"overlap_memory_slowdown", gpu.overlap_memory_slowdown},
      {"intra_node_bus_efficiency", gpu.intra_node_bus_efficiency},
      {"nvls_bus_bytes_per_s", gpu.nvls_bus_bytes_per_s},
      {"collective_base_latency_s", gpu.collective_base_latency_s},
      {"comm_half_efficiency_bytes", gpu.comm_half_efficiency_bytes},
  };
  for (const auto& [key, value] : rates) {
    if (value > 0) document[key] = value;
  }
  if (gpu.kernel_dispatch_s >= 0) document["kernel_dispatch_s"] = gpu.kernel_dispatch_s;
  if (!gpu.intra_node_transport.empty()) document["intra_node_transport"] = gpu.intra_node_transport;
  if (gpu.pcie_generation > 0) document["pcie_generation"] = gpu.pcie_generation;
  if (gpu.pcie_lanes > 0) document["pcie_lanes"] = gpu.pcie_lanes;
  // A GPU without float8 tensor cores writes no rate (0 is not a rate a catalog entry may give).
  if (gpu.peak_fp8_flops > 0) document["peak_fp8_flops"] = gpu.peak_fp8_flops;
  return document;
}

nlohmann::json to_json(const FabricSpec& fabric) {
  nlohmann::json document = {
      {"name", fabric.name},
      {"description", fabric.description},
      {"bytes_per_s_per_gpu", fabric.bytes_per_s_per_gpu},
      {"latency_s", fabric.latency_s},
  };
  if (fabric.nics_per_node > 0) document["nics_per_node"] = fabric.nics_per_node;
  if (fabric.bytes_per_s_per_nic > 0) document["bytes_per_s_per_nic"] = fabric.bytes_per_s_per_nic;
  if (fabric.nic_efficiency > 0) document["nic_efficiency"] = fabric.nic_efficiency;
  return document;
}

double FabricSpec::node_bytes_per_s(int gpus_per_node) const {
  if (nics_per_node > 0) {
    return static_cast<double>(nics_per_node) * (bytes_per_s_per_nic > 0 ? bytes_per_s_per_nic : bytes_per_s_per_gpu);
  }
  return static_cast<double>(gpus_per_node) * bytes_per_s_per_gpu;
}

}  // namespace shardplan
