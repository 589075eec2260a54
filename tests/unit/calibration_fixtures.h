// Synthetic samples shared by the calibration tests: deterministic relative noise and the α-β ring model the link
// fits assume.
#pragma once

#include <cstdint>
#include <random>

#include "collective_cost.h"

namespace shardplan::testing {

// Deterministic ±`amplitude` relative noise.
struct Noise {
  std::mt19937 generator{20261129};
  double operator()(double amplitude) {
    return 1.0 + amplitude * (2.0 * std::uniform_real_distribution<double>(0.0, 1.0)(generator) - 1.0);
  }
};

// The α-β ring model the fits assume (collective_cost.h): steps(n)·α + bus_factor(n)·S / B.
inline double ring_time_s(CollectiveKind kind, int ranks, std::int64_t bytes, double alpha_s, double bus_bytes_per_s) {
  const CollectiveAlgorithm& algorithm = collective_algorithm(kind);
  return algorithm.latency_steps(ranks) * alpha_s +
         algorithm.bus_factor(ranks) * static_cast<double>(bytes) / bus_bytes_per_s;
}

}  // namespace shardplan::testing
