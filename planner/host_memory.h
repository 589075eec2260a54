// Host memory of CPU offload: the model states (and offloaded activations) a plan keeps in host memory, per rank and
// per node, against the node's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster.h"
#include "memory_category.h"
#include "model_spec.h"
#include "plan.h"
#include "unit_layout.h"

namespace shardplan {

// Note [Host memory]: an offloading plan moves model states from the GPU to the host, and every rank of a node keeps
// its shard there: FSDP's CPUOffload / FSDP2's CPUOffloadPolicy(pin_memory=True) keep the sharded fp32 parameters and
// their gradients in pinned (page-locked) host memory, and the optimizer that then steps on the CPU allocates its
// states (AdamW's m and v) beside them; ZeRO-Offload of the optimizer alone moves the optimizer states. The bytes are exactly those persistent_memory leaves off the GPU, per unit and padded
// as the GPU's would be, so GPU + host always add up to the plan's states without offload (test_host_memory.cpp).
// Pinned memory cannot be swapped, so a node must hold all of it at once: gpus_per_node × a rank's bytes, against
// the node's host memory (the catalog's typical value per GPU type, or the cluster's "host_memory_gib_per_node").
// What the OS, the data loaders and the Python processes take besides is not counted: the check is a floor.
struct HostMemoryUse {
  MemoryByCategory per_rank{};      // sharded_params, sharded_grads and optimizer_states kept on the host
  std::int64_t per_rank_bytes = 0;
  std::int64_t per_node_bytes = 0;  // per_rank_bytes × ranks per node
  std::int64_t node_bytes = 0;      // the node's host memory; 0 when unknown (not checked)

  bool offloads() const { return per_rank_bytes > 0; }
  bool known() const { return node_bytes > 0; }
  bool fits() const { return !known() || per_node_bytes <= node_bytes; }
};

// The states each unit keeps on the host under `plan.offload` (the complement of persistent_memory's model states).
MemoryByCategory offloaded_memory(const std::vector<UnitLayout>& layouts, const Plan& plan);

// A plan's host memory on `cluster` (InputError from unit_layouts when its strategies do not fit the world).
HostMemoryUse host_memory_use(const Plan& plan, const ModelSpec& model, const Cluster& cluster);

// A floor of any wrapping's host memory per node under `strategy` and `offload`: the whole model as one flat
// parameter, padded once (Σ ceil(Ψ_i / g) >= ceil(Ψ / g)), so the search can skip settings no wrapping could fit.
std::int64_t host_memory_floor_per_node(const ShardingStrategy& strategy, const OffloadPolicy& offload,
                                        const ModelSpec& model, const TrainingConfig& training,
                                        const Cluster& cluster);

// "1.03 TiB" style size for messages.
std::string host_bytes_text(std::int64_t bytes);

// One line: "host memory (offloaded states): 1.03 TiB per node (8 × 131.4 GiB) of 2.00 TiB".
std::string describe(const HostMemoryUse& use);

// {"offloaded_bytes_per_rank", "needed_bytes_per_node", "node_bytes" (null when unknown), "fits", "by_category"}.
nlohmann::json to_json(const HostMemoryUse& use);

}  // namespace shardplan
