// Asynchronous handles: issue, compute, wait; several collectives in flight; idempotent wait; dropped handles.
#include <doctest/doctest.h>

#include "hybrid_groups.h"
#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

namespace {

std::vector<float> gathered_reference(int ranks, std::size_t count, int salt) {
  std::vector<float> expected;
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> shard = rank_data(r, count, salt);
    expected.insert(expected.end(), shard.begin(), shard.end());
  }
  return expected;
}

}  // namespace

TEST_CASE("issue an all-gather, compute while polling, then wait: the result is exact") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    CAPTURE(to_string(mechanism));
    auto world = make_world(mechanism);
    const std::size_t count = 100'003;  // odd, well past the eager limit so the transfer takes a while
    const std::vector<float> send = rank_data(world.rank(), count, 7);
    std::vector<float> recv(count * static_cast<std::size_t>(world.size()), kSentinel);
    CommHandle handle = world.all_gather(send.data(), count, recv.data());
    double sink = 0;
    for (int chunk = 0; chunk < 20; ++chunk) {
      sink += busy_compute(20'000);
      handle.test();  // progress for the non-blocking mechanism (Note [Progress])
    }
    handle.wait();
    CHECK(sink > 0);
    CHECK(recv == gathered_reference(world.size(), count, 7));
  }
}

TEST_CASE("several collectives in flight at once, waited in reverse order") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    CAPTURE(to_string(mechanism));
    auto world = make_world(mechanism);
    const int n = world.size();
    constexpr int kInFlight = 4;  // FSDP prefetches more than one unit ahead
    const std::size_t count = 1001;
    std::vector<std::vector<float>> sends;
    std::vector<std::vector<float>> recvs;
    for (int u = 0; u < kInFlight; ++u) {
      sends.push_back(rank_data(world.rank(), count, 10 + u));
      recvs.emplace_back(count * static_cast<std::size_t>(n), kSentinel);
    }
    std::vector<float> reduced = rank_data(world.rank(), count, 20);
    std::vector<CommHandle> handles;
    for (int u = 0; u < kInFlight; ++u) {
      handles.push_back(world.all_gather(sends[static_cast<std::size_t>(u)].data(), count,
                                         recvs[static_cast<std::size_t>(u)].data()));
    }
    handles.push_back(world.all_reduce(reduced.data(), count));
    busy_compute(100'000);
    for (auto it = handles.rbegin(); it != handles.rend(); ++it) it->wait();
    for (int u = 0; u < kInFlight; ++u) {
      CHECK(recvs[static_cast<std::size_t>(u)] == gathered_reference(n, count, 10 + u));
    }
    std::vector<float> expected(count, 0.0f);
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) expected[i] += value(r, i, 20);
    }
    CHECK(reduced == expected);
  }
}

TEST_CASE("wait is idempotent, test is true after completion, moved-from and default handles are done") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    CAPTURE(to_string(mechanism));
    auto world = make_world(mechanism);
    float x = 1.0f;
    CommHandle handle = world.all_reduce(&x, 1);
    handle.wait();
    handle.wait();
    CHECK(handle.done());
    CHECK(handle.test());
    CHECK(x == static_cast<float>(world.size()));

    CommHandle empty;
    CHECK(empty.done());
    CHECK(empty.test());
    empty.wait();

    float y = 2.0f;
    CommHandle first = world.all_reduce(&y, 1);
    CommHandle second = std::move(first);
    CHECK(first.done());  // NOLINT(bugprone-use-after-move): moved-from is documented as complete
    while (!second.test()) {
    }
    CHECK(y == 2.0f * static_cast<float>(world.size()));

    // Move-assigning over an in-flight handle waits for it first.
    float a = 1.0f;
    float b = 3.0f;
    CommHandle slot = world.all_reduce(&a, 1);
    slot = world.all_reduce(&b, 1);
    CHECK(a == static_cast<float>(world.size()));
    slot.wait();
    CHECK(b == 3.0f * static_cast<float>(world.size()));
  }
}

TEST_CASE("a handle dropped without wait completes its collective before it is gone") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    CAPTURE(to_string(mechanism));
    auto world = make_world(mechanism);
    std::vector<float> buffer = rank_data(world.rank(), 333, 8);
    { CommHandle dropped = world.broadcast(buffer.data(), buffer.size(), 0); }
    CHECK(buffer == rank_data(0, 333, 8));
  }
}

TEST_CASE("collectives in flight on the world and on a sub-group at the same time") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    CAPTURE(to_string(mechanism));
    auto world = make_world(mechanism);
    const int n = world.size();
    const int g = n % 2 == 0 ? 2 : 1;
    HybridGroups groups = make_hybrid_groups(world, g);
    std::vector<float> all = rank_data(world.rank(), 777, 9);
    std::vector<float> in_shard = rank_data(world.rank(), 555, 9);
    CommHandle on_world = world.all_reduce(all.data(), all.size());
    CommHandle on_shard = groups.shard->all_reduce(in_shard.data(), in_shard.size());
    on_shard.wait();
    on_world.wait();
    std::vector<float> expected_all(777, 0.0f);
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < 777; ++i) expected_all[i] += value(r, i, 9);
    }
    std::vector<float> expected_shard(555, 0.0f);
    for (const int r : groups.shard->group().world_ranks) {
      for (std::size_t i = 0; i < 555; ++i) expected_shard[i] += value(r, i, 9);
    }
    CHECK(all == expected_all);
    CHECK(in_shard == expected_shard);
  }
}
