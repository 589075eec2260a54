// Cluster: nodes × GPUs per node of one GPU type, joined by one inter-node fabric; parsed from "4x8xH100-80GB" or JSON.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "hardware_catalog.h"

namespace shardplan {

struct Cluster {
  int nodes = 1;
  int gpus_per_node = 1;
  GpuSpec gpu;
  FabricSpec fabric;
  double price_per_gpu_hour = 0;  // the catalog default unless the cluster overrides it
  // Host memory of one node (CPU offload's states live there); the GPU's catalog default unless the cluster file
  // gives "host_memory_gib_per_node" or "host_memory_bytes_per_node". 0: unknown.
  std::int64_t host_memory_bytes_per_node = 0;

  int world_size() const { return nodes * gpus_per_node; }
  std::string describe() const;  // "4 × 8 × H100-80GB over ib-ndr (32 GPUs)"
};

// Accepts "8xH100-80GB" (one node of 8), "4x8xH100-80GB" (4 nodes of 8), or the path of a cluster JSON file (or the
// document inline, Note [Inline JSON] in json_input.h)
// (`shardplan.cluster/v1`: {"gpu", "nodes", "gpus_per_node", optional "fabric", "price_per_gpu_hour",
// "host_memory_gib_per_node" or "host_memory_bytes_per_node"}).
// Throws InputError: unknown GPU (closest names), zero or negative counts, malformed JSON with line:column.
Cluster parse_cluster(const std::string& text_or_path, const HardwareCatalog& catalog);
Cluster cluster_from_json(const nlohmann::json& document, const std::string& origin, const HardwareCatalog& catalog);

nlohmann::json to_json(const Cluster& cluster);

}  // namespace shardplan
