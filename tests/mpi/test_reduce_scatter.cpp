// reduce_scatter against a CPU reference: sum, max and min, odd and zero counts.
#include <doctest/doctest.h>

#include <algorithm>

#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

namespace {

// What rank `rank` should receive: op over all ranks of their block `rank`.
std::vector<float> reference(int rank, int ranks, std::size_t count, ReduceOp op) {
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t index = static_cast<std::size_t>(rank) * count + i;
    float acc = value(0, index, 3);
    for (int r = 1; r < ranks; ++r) {
      const float v = value(r, index, 3);
      acc = op == ReduceOp::sum ? acc + v : op == ReduceOp::max ? std::max(acc, v) : std::min(acc, v);
    }
    out[i] = acc;
  }
  return out;
}

}  // namespace

TEST_CASE("reduce_scatter gives each rank the reduction of its block") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    auto world = make_world(mechanism);
    const int n = world.size();
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      for (const std::size_t count : kOddCounts) {
        CAPTURE(to_string(mechanism));
        CAPTURE(to_string(op));
        CAPTURE(count);
        const std::vector<float> send = rank_data(world.rank(), count * static_cast<std::size_t>(n), 3);
        std::vector<float> recv(count + 1, kSentinel);
        world.reduce_scatter(send.data(), recv.data(), count, op).wait();
        std::vector<float> expected = reference(world.rank(), n, count, op);
        expected.push_back(kSentinel);
        CHECK(recv == expected);
      }
    }
  }
}

TEST_CASE("reduce_scatter defaults to sum and leaves its input untouched") {
  auto world = make_world(AsyncMechanism::nonblocking);
  const std::size_t count = 7;
  const std::vector<float> send = rank_data(world.rank(), count * static_cast<std::size_t>(world.size()), 3);
  const std::vector<float> copy = send;
  std::vector<float> recv(count);
  world.reduce_scatter(send.data(), recv.data(), count).wait();
  CHECK(recv == reference(world.rank(), world.size(), count, ReduceOp::sum));
  CHECK(send == copy);
}
