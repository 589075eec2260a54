// Deterministic data, CPU references and shared helpers for the `mpi` suite.
#pragma once

#include <mpi.h>

#include <array>
#include <cstddef>
#include <vector>

#include "mpi_communicator.h"

namespace shardplan::comm::testing {

inline constexpr std::array<AsyncMechanism, 2> kMechanisms = {AsyncMechanism::nonblocking, AsyncMechanism::comm_thread};
// Odd counts (no rank-multiple padding), a large-ish one past the eager limit, and the empty collective.
inline constexpr std::array<std::size_t, 5> kOddCounts = {1, 3, 7, 1001, 0};
// Written where nothing should be written, to catch out-of-range writes.
inline constexpr float kSentinel = -12345.0f;

inline int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline MpiCommunicator make_world(AsyncMechanism mechanism) {
  MpiCommOptions options;
  options.mechanism = mechanism;
  return MpiCommunicator(MPI_COMM_WORLD, options);
}

// Element i of rank r's data: small integers, so sums over any world are exact in float and any order of reduction
// gives the same bits as the CPU reference.
inline float value(int rank, std::size_t i, int salt = 0) {
  return static_cast<float>(static_cast<int>((static_cast<std::size_t>(rank + 1) * 37 + i * 11 +
                                              static_cast<std::size_t>(salt) * 5) % 211) - 105);
}

inline std::vector<float> rank_data(int rank, std::size_t count, int salt = 0) {
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = value(rank, i, salt);
  return data;
}

// A busy loop of fixed work that MPI knows nothing about (the "current unit's compute"); returns a value so the
// compiler keeps it.
inline double busy_compute(std::size_t iterations) {
  double x = 1.0;
  for (std::size_t i = 0; i < iterations; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

}  // namespace shardplan::comm::testing
