// Cluster parsing from "8xH100-80GB" / "4x8xH100-80GB" strings and `shardplan.cluster/v1` JSON, and its JSON output.
#include "cluster.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "errors.h"
#include "input_limits.h"
#include "json_input.h"
#include "name_suggest.h"

namespace shardplan {
namespace {

constexpr std::string_view kClusterSchema = "shardplan.cluster/v1";

// The largest clusters built so far are ~10^5 GPUs; a million means a typo (an extra digit run), not a plan.
constexpr std::int64_t kMaxWorldSize = limits::kMaxWorldSize;

constexpr std::string_view kForms =
    "expected COUNTxTYPE (e.g. 8xH100-80GB), NODESxGPUSxTYPE (e.g. 4x8xH100-80GB) or a cluster JSON file";

bool ends_with_json(std::string_view text) {
  if (text.size() < 5) return false;
  std::string tail(text.substr(text.size() - 5));
  for (auto& c : tail) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return tail == ".json";
}

// Anything but a directory: a FIFO or a device named is refused as a file (Note [Input files]), not parsed as a spec.
bool names_existing_file(const std::string& text) {
  std::error_code error;  // a name the filesystem rejects is simply not a file
  const auto status = std::filesystem::symlink_status(text, error);
  return std::filesystem::exists(status) && !std::filesystem::is_directory(status);
}

// Accepts what `describe()` prints and what people paste: spaces around the separators and "×" for "x".
std::string normalize(std::string_view text) {
  std::string result;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.substr(i, 2) == "\xC3\x97") {  // U+00D7 MULTIPLICATION SIGN in UTF-8
      result += 'x';
      ++i;
    } else if (!std::isspace(static_cast<unsigned char>(text[i]))) {
      result += text[i];
    }
  }
  return result;
}

std::size_t find_separator(std::string_view text) {
  const auto lower = text.find('x');
  const auto upper = text.find('X');
  return std::min(lower, upper);
}

// A token is read as a count when it starts like a number; GPU names never do (checked when a catalog entry is added).
bool looks_like_count(std::string_view token) {
  return !token.empty() && (std::isdigit(static_cast<unsigned char>(token.front())) || token.front() == '-' ||
                            token.front() == '+');
}

[[noreturn]] void fail(const std::string& text, const std::string& problem) {
  throw InputError("cluster '" + text + "': " + problem);
}

std::int64_t parse_count(const std::string& text, std::string_view token, std::string_view what) {
  const std::string name(what);
  if (token.empty()) fail(text, "missing " + name + " before 'x'; " + std::string(kForms));
  if (token.front() == '-') fail(text, name + " must be positive, got '" + std::string(token) + "'");
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (end != token.data() + token.size() && error != std::errc::result_out_of_range) {
    fail(text, name + " must be a whole number, got '" + std::string(token) + "'; " + std::string(kForms));
  }
  if (error == std::errc::result_out_of_range || value > kMaxWorldSize) {
    fail(text, name + " " + std::string(token) + " is absurd (more than 1000000 GPUs)");
  }
  if (value == 0) fail(text, name + " must be at least 1, got '" + std::string(token) + "'");
  return value;
}

const GpuSpec& lookup_gpu(const std::string& text, const std::string& type, const HardwareCatalog& catalog) {
  if (type.empty()) fail(text, "missing GPU type after the counts; " + std::string(kForms));
  try {
    return catalog.gpu(type);
  } catch (const InputError& error) {
    fail(text, error.what());
  }
}

bool is_gpu_name(std::string_view text, const HardwareCatalog& catalog) {
  const auto names = catalog.gpu_names();
  return std::any_of(names.begin(), names.end(), [&](const std::string& name) { return edit_distance(name, text) == 0; });
}

Cluster make_cluster(std::int64_t nodes, std::int64_t gpus_per_node, const GpuSpec& gpu, const FabricSpec& fabric,
                     double price_per_gpu_hour) {
  Cluster cluster;
  cluster.nodes = static_cast<int>(nodes);
  cluster.gpus_per_node = static_cast<int>(gpus_per_node);
  cluster.gpu = gpu;
  cluster.fabric = fabric;
  cluster.price_per_gpu_hour = price_per_gpu_hour;
  cluster.host_memory_bytes_per_node = gpu.host_memory_bytes_per_node;
  return cluster;
}

const FabricSpec& default_fabric(const std::string& context, const GpuSpec& gpu, const HardwareCatalog& catalog) {
  try {
    return catalog.fabric(gpu.default_fabric);
  } catch (const InputError& error) {
    throw InputError(context + ": default fabric of GPU '" + gpu.name + "': " + error.what());
  }
}

Cluster parse_cluster_string(const std::string& text, const HardwareCatalog& catalog) {
  const std::string spec = normalize(text);
  if (spec.empty()) fail(text, "empty; " + std::string(kForms));

  const std::size_t first = find_separator(spec);
  const std::string_view head = std::string_view(spec).substr(0, first);
  if (!head.empty() && !looks_like_count(head)) {
    if (first == std::string::npos || is_gpu_name(spec, catalog)) {
      fail(text, "missing GPU count; " + std::string(kForms));
    }
    fail(text, "'" + std::string(head) + "' is not a GPU count; " + std::string(kForms));
  }
  if (first == std::string::npos) fail(text, "missing GPU type after the count; " + std::string(kForms));

  const std::string rest = spec.substr(first + 1);
  const std::size_t second = find_separator(rest);
  const std::string_view middle = std::string_view(rest).substr(0, second);

  if (looks_like_count(middle)) {
    // Three parts: NODESxGPUSxTYPE. "4x8" (no type) lands here too and is reported as a missing type.
    const std::int64_t nodes = parse_count(text, head, "node count");
    const std::int64_t gpus_per_node = parse_count(text, middle, "GPUs per node");
    if (nodes * gpus_per_node > kMaxWorldSize) {
      fail(text, std::to_string(nodes * gpus_per_node) + " GPUs is absurd (more than 1000000)");
    }
    const std::string type = second == std::string::npos ? "" : rest.substr(second + 1);
    const GpuSpec& gpu = lookup_gpu(text, type, catalog);
    return make_cluster(nodes, gpus_per_node, gpu, default_fabric("cluster '" + text + "'", gpu, catalog),
                        gpu.price_per_gpu_hour);
  }

  // Two parts: COUNTxTYPE. Up to one board it is one node; beyond, it must fill whole boards ("16xH100-80GB" = 2 × 8),
  // because guessing an uneven split would silently model a machine nobody has.
  const std::int64_t count = parse_count(text, head, "GPU count");
  const GpuSpec& gpu = lookup_gpu(text, rest, catalog);
  const std::int64_t board = std::max(1, gpu.default_gpus_per_node);
  std::int64_t nodes = 1, gpus_per_node = count;
  if (count > board) {
    if (count % board != 0) {
      fail(text, std::to_string(count) + " GPUs do not fill whole nodes of " + std::to_string(board) + " " + gpu.name +
                     "; write NODESxGPUSxTYPE, e.g. 1x" + std::to_string(count) + "x" + gpu.name);
    }
    nodes = count / board;
    gpus_per_node = board;
  }
  return make_cluster(nodes, gpus_per_node, gpu, default_fabric("cluster '" + text + "'", gpu, catalog),
                      gpu.price_per_gpu_hour);
}

}  // namespace

std::string Cluster::describe() const {
  const int total = world_size();
  const std::string unit = gpu.name == "cpu" ? (total == 1 ? "rank" : "ranks") : (total == 1 ? "GPU" : "GPUs");
  return std::to_string(nodes) + " \xC3\x97 " + std::to_string(gpus_per_node) + " \xC3\x97 " + gpu.name + " over " +
         fabric.name + " (" + std::to_string(total) + " " + unit + ")";
}

Cluster parse_cluster(const std::string& text_or_path, const HardwareCatalog& catalog) {
  if (is_inline_json(text_or_path)) {  // Note [Inline JSON]
    return cluster_from_json(read_json_argument(text_or_path, "cluster"), json_argument_origin(text_or_path, "cluster"),
                             catalog);
  }
  if (ends_with_json(text_or_path) || names_existing_file(text_or_path)) {
    return cluster_from_json(read_json_file(text_or_path), text_or_path, catalog);
  }
  return parse_cluster_string(text_or_path, catalog);
}

Cluster cluster_from_json(const nlohmann::json& document, const std::string& origin, const HardwareCatalog& catalog) {
  const JsonObjectReader root(document, origin);
  root.reject_unknown_keys(
      {"schema", "description", "gpu", "nodes", "gpus_per_node", "fabric", "price_per_gpu_hour", "catalog",
       "host_memory_gib_per_node", "host_memory_bytes_per_node"});
  if (root.has("schema") && (!root.raw().at("schema").is_string() ||
                             root.raw().at("schema").get<std::string>() != kClusterSchema)) {
    root.fail("schema", "\"" + std::string(kClusterSchema) + "\"");
  }

  // An inline catalog extends a copy: the caller's catalog stays as it was for the next cluster.
  HardwareCatalog local = catalog;
  if (root.has("catalog")) local.merge_user_json(root.raw().at("catalog"), origin, "catalog");

  const std::string gpu_name = root.string("gpu");
  const GpuSpec* gpu = nullptr;
  try {
    gpu = &local.gpu(gpu_name);
  } catch (const InputError& error) {
    throw InputError(origin + ": field 'gpu': " + error.what());
  }

  const std::int64_t nodes = root.optional_positive_int("nodes").value_or(1);
  const std::int64_t gpus_per_node = root.optional_positive_int("gpus_per_node").value_or(gpu->default_gpus_per_node);
  if (nodes > kMaxWorldSize) root.fail("nodes", "at most 1000000 nodes");
  if (gpus_per_node > kMaxWorldSize) root.fail("gpus_per_node", "at most 1000000 GPUs per node");
  if (nodes * gpus_per_node > kMaxWorldSize) {
    throw InputError(origin + ": fields 'nodes' \xC3\x97 'gpus_per_node': " + std::to_string(nodes * gpus_per_node) +
                     " GPUs is absurd (expected at most 1000000)");
  }

  const std::string fabric_name = root.optional_string("fabric").value_or(gpu->default_fabric);
  const FabricSpec* fabric = nullptr;
  try {
    fabric = &local.fabric(fabric_name);
  } catch (const InputError& error) {
    const std::string field = root.has("fabric") ? "field 'fabric'" : "default fabric of GPU '" + gpu->name + "'";
    throw InputError(origin + ": " + field + ": " + error.what());
  }

  // Zero is allowed: hardware one already owns (Note [Input limits]: 1e308 gave -nan speed-ups).
  const double price = root.optional_number_in_range("price_per_gpu_hour", 0, limits::kMostPricePerGpuHour)
                           .value_or(gpu->price_per_gpu_hour);
  Cluster cluster = make_cluster(nodes, gpus_per_node, *gpu, *fabric, price);
  apply_host_memory_fields(root, cluster.host_memory_bytes_per_node);
  return cluster;
}

nlohmann::json to_json(const Cluster& cluster) {
  return {
      {"schema", std::string(kClusterSchema)},
      {"nodes", cluster.nodes},
      {"gpus_per_node", cluster.gpus_per_node},
      {"world_size", cluster.world_size()},
      {"gpu", to_json(cluster.gpu)},
      {"fabric", to_json(cluster.fabric)},
      {"price_per_gpu_hour", cluster.price_per_gpu_hour},
      {"host_memory_bytes_per_node", cluster.host_memory_bytes_per_node},
  };
}

}  // namespace shardplan
