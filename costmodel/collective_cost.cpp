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

  // Hierarchy (DESIGN, "Collectives"): a ring that crosses nodes is paced by its slowest link — normally the NIC per
  // GPU, but a fabric faster than the intra-node link (PCIe-only boxes) leaves the intra-node link the bottleneck.
  // Its per-step latency is the fabric's α.
  double latency_s = profile.intra_node.latency_s;
  double bus_bytes_per_s = profile.intra_node.bus_bytes_per_s;
  cost.tier = profile.intra_node.name;
  if (group.spans_nodes) {
    latency_s = profile.inter_node.latency_s;
    bus_bytes_per_s = std::min(profile.intra_node.bus_bytes_per_s, profile.inter_node.bus_bytes_per_s);
    cost.tier = profile.inter_node.name;
  }

  const auto bytes = static_cast<double>(message_bytes);
  const int ranks = group.ranks;
  // α-β ring model (Thakur, Rabenseifner & Gropp 2005; nccl-tests doc/PERFORMANCE.md for the per-link share):
  // time = steps(n)·α + bus_factor(n)·S / (busbw_peak · eff(S)).
  cost.time_s = algorithm.latency_steps(ranks) * latency_s;
  if (message_bytes > 0) {
    SHARDPLAN_CHECK(bus_bytes_per_s > 0 && profile.bus_efficiency > 0,
                    "link tier '" + cost.tier + "' has no bandwidth or efficiency");
    // eff(S) = bus_efficiency · S / (S + S½): the saturating shape of nccl-tests' busbw-vs-size curves
    // (HardwareProfile::comm_half_efficiency_bytes).
    const double efficiency = profile.bus_efficiency * bytes / (bytes + profile.comm_half_efficiency_bytes);
    cost.time_s += algorithm.bus_factor(ranks) * bytes / (bus_bytes_per_s * efficiency);
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
