// all_reduce against a CPU reference: sum, max and min in place, odd and zero counts.
#include <doctest/doctest.h>

#include <algorithm>

#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

TEST_CASE("all_reduce reduces in place on every rank") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    auto world = make_world(mechanism);
    const int n = world.size();
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      for (const std::size_t count : kOddCounts) {
        CAPTURE(to_string(mechanism));
        CAPTURE(to_string(op));
        CAPTURE(count);
        std::vector<float> buffer = rank_data(world.rank(), count, 4);
        buffer.push_back(kSentinel);  // guard, outside the count
        world.all_reduce(buffer.data(), count, op).wait();
        std::vector<float> expected(count);
        for (std::size_t i = 0; i < count; ++i) {
          float acc = value(0, i, 4);
          for (int r = 1; r < n; ++r) {
            const float v = value(r, i, 4);
            acc = op == ReduceOp::sum ? acc + v : op == ReduceOp::max ? std::max(acc, v) : std::min(acc, v);
          }
          expected[i] = acc;
        }
        expected.push_back(kSentinel);
        CHECK(buffer == expected);
      }
    }
  }
}
