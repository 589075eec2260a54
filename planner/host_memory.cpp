// Host memory of CPU offload (Note [Host memory]): the offloaded states per rank and per node, and its floor.
#include "host_memory.h"

#include <cstdio>

#include "activation_offload.h"

namespace shardplan {

MemoryByCategory offloaded_memory(const std::vector<UnitLayout>& layouts, const Plan& plan) {
  MemoryByCategory host{};
  const auto& precision = plan.training.precision;
  const auto add = [&](MemoryCategory category, std::int64_t bytes) {
    host[static_cast<std::size_t>(category)] += bytes;
  };
  // The mirror image of persistent_memory (unit_layout.cpp): what it leaves off the GPU is here.
  for (const auto& layout : layouts) {
    if (plan.offload.params) {
      add(MemoryCategory::sharded_params, layout.shard_bytes);
      add(MemoryCategory::sharded_grads, layout.grad_shard_elements * precision.grad_storage_bytes);
    }
    if (plan.offload.params || plan.offload.optimizer) {
      add(MemoryCategory::optimizer_states,
          optimizer_held_bytes(precision, plan.training.optimizer, layout.optimizer_shard_elements));
    }
  }
  return host;
}

namespace {

HostMemoryUse use_of(const MemoryByCategory& per_rank, const Cluster& cluster) {
  HostMemoryUse use;
  use.per_rank = per_rank;
  for (const long long bytes : per_rank) use.per_rank_bytes += bytes;
  use.per_node_bytes = use.per_rank_bytes * cluster.gpus_per_node;
  use.node_bytes = cluster.host_memory_bytes_per_node;
  return use;
}

}  // namespace

HostMemoryUse host_memory_use(const Plan& plan, const ModelSpec& model, const Cluster& cluster) {
  MemoryByCategory per_rank{};
  if (plan.offload.params || plan.offload.optimizer) {
    per_rank = offloaded_memory(unit_layouts(plan, model, cluster.world_size(), cluster.gpus_per_node), plan);
  }
  // Note [Activation offloading] (activation_offload.h): one micro-batch's offloaded activations, pinned.
  per_rank[static_cast<std::size_t>(MemoryCategory::activations)] += host_activation_bytes(plan, model);
  return use_of(per_rank, cluster);
}

std::int64_t host_memory_floor_per_node(const ShardingStrategy& strategy, const OffloadPolicy& offload,
                                        const ModelSpec& model, const TrainingConfig& training,
                                        const Cluster& cluster) {
  if (!offload.params && !offload.optimizer) return 0;
  const UnitLayout layout =
      states_floor_layout(strategy, model, training, cluster.world_size(), cluster.gpus_per_node);
  Plan states_only;
  states_only.training = training;
  states_only.offload = offload;
  return use_of(offloaded_memory({layout}, states_only), cluster).per_node_bytes;
}

std::string host_bytes_text(std::int64_t bytes) {
  const double gib = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
  char text[48];
  if (gib >= 1024) {
    std::snprintf(text, sizeof text, "%.2f TiB", gib / 1024);
  } else {
    std::snprintf(text, sizeof text, "%.1f GiB", gib);
  }
  return text;
}

std::string describe(const HostMemoryUse& use) {
  const int ranks = use.per_rank_bytes > 0 ? static_cast<int>(use.per_node_bytes / use.per_rank_bytes) : 0;
  const bool activations = use.per_rank[static_cast<std::size_t>(MemoryCategory::activations)] > 0;
  std::string text = std::string("host memory (offloaded ") + (activations ? "states and activations" : "states") +
                     "): " + host_bytes_text(use.per_node_bytes) + " per node (" +
                     std::to_string(ranks) + " x " + host_bytes_text(use.per_rank_bytes) + ")";
  if (!use.known()) return text + ", the node's host memory is not known (not checked)";
  return text + " of " + host_bytes_text(use.node_bytes) + (use.fits() ? "" : ": DOES NOT FIT");
}

nlohmann::json to_json(const HostMemoryUse& use) {
  nlohmann::json by_category = nlohmann::json::object();
  for (const MemoryCategory category :
       {MemoryCategory::sharded_params, MemoryCategory::sharded_grads, MemoryCategory::optimizer_states}) {
    by_category[std::string(to_string(category))] = use.per_rank[static_cast<std::size_t>(category)];
  }
  // Note [Activation offloading]: written only when activations are offloaded, so other plans report as before.
  if (const std::int64_t bytes = use.per_rank[static_cast<std::size_t>(MemoryCategory::activations)]; bytes > 0) {
    by_category[std::string(to_string(MemoryCategory::activations))] = bytes;
  }
  return {{"offloaded_bytes_per_rank", use.per_rank_bytes},
          {"needed_bytes_per_node", use.per_node_bytes},
          {"node_bytes", use.known() ? nlohmann::json(use.node_bytes) : nlohmann::json(nullptr)},
          {"fits", use.fits()},
          {"by_category", std::move(by_category)}};
}

}  // namespace shardplan
