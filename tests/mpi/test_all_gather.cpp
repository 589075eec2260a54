// all_gather against a CPU reference: odd and zero counts, in place, no writes outside the output.
#include <doctest/doctest.h>

#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

TEST_CASE("all_gather concatenates every rank's shard for odd and zero counts") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    auto world = make_world(mechanism);
    const int n = world.size();
    for (const std::size_t count : kOddCounts) {
      CAPTURE(to_string(mechanism));
      CAPTURE(count);
      const std::vector<float> send = rank_data(world.rank(), count, 1);
      // One guard element past the end: nothing may be written there.
      std::vector<float> recv(count * static_cast<std::size_t>(n) + 1, kSentinel);
      CommHandle handle = world.all_gather(send.data(), count, recv.data());
      handle.wait();
      std::vector<float> expected;
      for (int r = 0; r < n; ++r) {
        const std::vector<float> shard = rank_data(r, count, 1);
        expected.insert(expected.end(), shard.begin(), shard.end());
      }
      expected.push_back(kSentinel);
      CHECK(recv == expected);
    }
  }
}

TEST_CASE("all_gather in place: the shard already sits in this rank's slot") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    auto world = make_world(mechanism);
    const int n = world.size();
    for (const std::size_t count : kOddCounts) {
      CAPTURE(to_string(mechanism));
      CAPTURE(count);
      std::vector<float> flat(count * static_cast<std::size_t>(n), kSentinel);
      const std::vector<float> mine = rank_data(world.rank(), count, 2);
      float* slot = flat.data() + static_cast<std::size_t>(world.rank()) * count;
      std::copy(mine.begin(), mine.end(), slot);
      world.all_gather(slot, count, flat.data()).wait();
      for (int r = 0; r < n; ++r) {
        const std::vector<float> shard = rank_data(r, count, 2);
        CHECK(std::equal(shard.begin(), shard.end(), flat.begin() + static_cast<std::ptrdiff_t>(r * count)));
      }
    }
  }
}
