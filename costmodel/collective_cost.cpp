// The collective-cost driver: picks a collective's plug-in and link tier, and applies the α-β model and busbw rules.
#include "collective_cost.h"

#include <algorithm>

#include "errors.h"

namespace shardplan {

const CollectiveAlgorithm& collective_algorithm(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_gather: return all_gather_algorithm();
    case CollectiveKind::reduce_scatter: return reduce_scatter_algorithm();
    case CollectiveKind::all_reduce: return all_reduce_algorithm();
    case CollectiveKind::all_to_all: return all_to_all_algorithm();
  }
  throw InternalError("unknown CollectiveKind " + std::to_string(static_cast<int>(kind)));
}

const char* to_string(CollectiveKind kind) { return collective_algorithm(kind).name; }

CollectiveCost collective_cost(CollectiveKind kind, std::int64_t message_bytes, const GroupPlacement& group,
                               const HardwareProfile& profile) {
  SHARDPLAN_CHECK(message_bytes >= 0, "collective message size must be non-negative, got " +
                                          std::to_string(message_bytes));
  CollectiveCost cost;
  if (group.ranks <= 1) {  // nothing to exchange: a group of one rank (or a disabled group)
    cost.tier = "none";
    return cost;
  }
  const CollectiveAlgorithm& algorithm = collective_algorithm(kind);
  if (const auto* fit = profile.find_collective_fit(algorithm.name, group.ranks, group.spans_nodes)) {
    // The calibrated cell: the same α-β form it was fitted with (calibration.h, LinkFit), no efficiency curve.
    cost.tier = "calibrated";
    cost.time_s = algorithm.latency_steps(group.ranks) * fit->latency_s +
                  algorithm.bus_factor(group.ranks) * static_cast<double>(message_bytes) / fit->bus_bytes_per_s;
    cost.algbw_bytes_per_s = algorithm_bandwidth(message_bytes, cost.time_s);
    cost.busbw_bytes_per_s = cost.algbw_bytes_per_s * algorithm.bus_factor(group.ranks);
    return cost;
  }

  const auto bytes = static_cast<double>(message_bytes);
  const int ranks = group.ranks;
  const int ranks_per_node =
      group.ranks_per_node > 0 ? group.ranks_per_node : std::min(ranks, std::max(1, profile.gpus_per_node));
  // Latency (NCCL's ring model, src/graph/tuning.cc: baseLat + (nsteps − nInterSteps)·intraLat + nInterSteps·interLat):
  // of a ring's steps, those that cross a node boundary pay the network's per-hop latency — nodes − 1 of the n − 1
  // steps of an all-gather or reduce-scatter, twice that for an all-reduce.
  const double steps = algorithm.latency_steps(ranks);
  const int nodes = group.spans_nodes ? std::max(2, (ranks + ranks_per_node - 1) / ranks_per_node) : 1;
  const double inter_steps = ranks > 1 ? steps * static_cast<double>(nodes - 1) / static_cast<double>(ranks - 1) : 0.0;
  cost.time_s = profile.collective_base_latency_s + (steps - inter_steps) * profile.intra_node.latency_s +
                inter_steps * profile.inter_node.latency_s;

  // Note [Rails]: a ring that crosses nodes is not paced by one GPU's NIC. NCCL builds one ring (channel) per rail and
  // runs them in parallel, each through its own NIC, so a ring over every GPU of each node reaches the node's whole
  // network bandwidth as bus bandwidth (nccl-tests on multi-node DGX A100, 8 × HDR 200 Gb/s: 192 GB/s all-reduce
  // busbw, NVIDIA/nccl#812; 4 × HDR for 8 GPUs: 85-96 GB/s, NVIDIA/nccl-tests#119; NDR: 46-48 GB/s per NIC,
  // NVIDIA/nccl-tests#290), capped by the intra-node links its channels also cross. A group with fewer ranks per node
  // (HSDP's replica groups: one per node) runs beside the node's other groups and gets its share of the NICs.
  const double intra_bus = profile.intra_node.bus_bytes_per_s * profile.intra_node.efficiency;
  double bus_bytes_per_s = intra_bus;
  cost.tier = profile.intra_node.name;
  if (group.spans_nodes) {
    const double node_share =
        std::min(1.0, static_cast<double>(ranks_per_node) / static_cast<double>(std::max(1, profile.gpus_per_node)));
    const double network_bus = profile.inter_node.bus_bytes_per_s * profile.inter_node.efficiency * node_share;
    bus_bytes_per_s = ranks_per_node > 1 ? std::min(intra_bus, network_bus) : network_bus;
    cost.tier = profile.inter_node.name;
  } else if (kind == CollectiveKind::all_reduce && profile.nvls_bus_bytes_per_s > bus_bytes_per_s && ranks > 2) {
    // NCCL picks NVLink SHARP for all-reduce within an NVSwitch node where the switch can reduce (Hopper and later):
    // ≈ 480 GB/s busbw on 8 × H100 against the ring's ≈ 370 (NVIDIA/nccl-tests#212).
    bus_bytes_per_s = profile.nvls_bus_bytes_per_s;
    cost.tier = profile.intra_node.name + " (NVLS)";
  }
  if (message_bytes > 0) {
    SHARDPLAN_CHECK(bus_bytes_per_s > 0, "link tier '" + cost.tier + "' has no bandwidth or efficiency");
    // (S + S½) / busbw: below S½ a message reaches under half the bandwidth even after its latency (the shape of
    // measured busbw-vs-size curves; HardwareProfile::comm_half_efficiency_bytes).
    cost.time_s += algorithm.bus_factor(ranks) * (bytes + profile.comm_half_efficiency_bytes) / bus_bytes_per_s;
  }
  cost.algbw_bytes_per_s = algorithm_bandwidth(message_bytes, cost.time_s);
  cost.busbw_bytes_per_s = cost.algbw_bytes_per_s * algorithm.bus_factor(ranks);
  return cost;
}

double algorithm_bandwidth(std::int64_t message_bytes, double time_s) {
  SHARDPLAN_CHECK(message_bytes >= 0 && time_s >= 0, "bandwidth of a negative size or time");
  // nccl-tests doc/PERFORMANCE.md: algbw = S / t. A zero-time (empty) operation moved nothing.
  return time_s > 0 ? static_cast<double>(message_bytes) / time_s : 0.0;
}

double bus_bandwidth(CollectiveKind kind, std::int64_t message_bytes, double time_s, int ranks) {
  // nccl-tests doc/PERFORMANCE.md: busbw = algbw × the collective's factor (all-gather and reduce-scatter (n−1)/n,
  // all-reduce 2(n−1)/n), comparable with the link's peak whatever the rank count.
  return algorithm_bandwidth(message_bytes, time_s) * collective_algorithm(kind).bus_factor(ranks);
}

}  // namespace shardplan
