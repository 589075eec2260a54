// broadcast from every root against a CPU reference, and barrier's synchronisation.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

TEST_CASE("broadcast copies the root's buffer to every rank, for every root") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    auto world = make_world(mechanism);
    for (int root = 0; root < world.size(); ++root) {
      for (const std::size_t count : kOddCounts) {
        CAPTURE(to_string(mechanism));
        CAPTURE(root);
        CAPTURE(count);
        std::vector<float> buffer = rank_data(world.rank(), count, 5);
        buffer.push_back(kSentinel);
        world.broadcast(buffer.data(), count, root).wait();
        std::vector<float> expected = rank_data(root, count, 5);
        expected.push_back(kSentinel);
        CHECK(buffer == expected);
      }
    }
  }
}

TEST_CASE("barrier holds every rank until the last one arrives") {
  using Clock = std::chrono::steady_clock;
  constexpr auto kDelay = std::chrono::milliseconds(150);
  for (const AsyncMechanism mechanism : kMechanisms) {
    CAPTURE(to_string(mechanism));
    auto world = make_world(mechanism);
    world.barrier();
    const auto start = Clock::now();
    // The last rank arrives late; nobody may leave before it arrived. A generous margin absorbs how unevenly the
    // ranks left the first barrier when they outnumber the cores.
    if (world.rank() == world.size() - 1) std::this_thread::sleep_for(kDelay);
    world.barrier();
    const auto waited = Clock::now() - start;
    CHECK(waited >= kDelay / 3);
    CHECK(world.counters().calls(Collective::barrier) == 2);
  }
}
