// Point-to-point: messages around a ring in both directions, matched by tag whatever their posting order, odd and
// zero counts, the p2p counters (and the collective counters left alone), bad peers and tags refused.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "errors.h"
#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

namespace {

// Rank r's value of element i of its message tagged `tag`: distinct per sender, element and tag.
float message_value(int rank, std::size_t i, int tag) {
  return static_cast<float>(rank * 1000 + tag * 10) + static_cast<float>(i);
}

}  // namespace

TEST_CASE("send/recv: both directions around a ring, tags matched out of posting order, counted apart") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    CAPTURE(to_string(mechanism));
    auto world = make_world(mechanism);
    const int n = world.size();
    if (n == 1) continue;  // no peer: the refusal case below covers one rank
    const int next = (world.rank() + 1) % n, previous = (world.rank() + n - 1) % n;
    const std::size_t count = 7;  // odd
    std::vector<float> forward(count), backward(count), later(count);
    for (std::size_t i = 0; i < count; ++i) {
      forward[i] = message_value(world.rank(), i, 1);
      backward[i] = message_value(world.rank(), i, 2);
      later[i] = message_value(world.rank(), i, 3);
    }
    std::vector<float> from_previous(count), from_next(count), later_from_previous(count);
    // Receives posted in the opposite order to the sends: tag 3 first, as a pipeline posts later micro-batches.
    CommHandle r3 = world.recv(later_from_previous.data(), count, previous, 3);
    CommHandle r1 = world.recv(from_previous.data(), count, previous, 1);
    CommHandle r2 = world.recv(from_next.data(), count, next, 2);
    CommHandle s1 = world.send(forward.data(), count, next, 1);
    CommHandle s2 = world.send(backward.data(), count, previous, 2);
    CommHandle s3 = world.send(later.data(), count, next, 3);
    CommHandle empty_send = world.send(nullptr, 0, next, 4);
    CommHandle empty_recv = world.recv(nullptr, 0, previous, 4);
    for (CommHandle* handle : {&r1, &r2, &r3, &s1, &s2, &s3, &empty_send, &empty_recv}) handle->wait();
    for (std::size_t i = 0; i < count; ++i) {
      CHECK(from_previous[i] == message_value(previous, i, 1));
      CHECK(from_next[i] == message_value(next, i, 2));
      CHECK(later_from_previous[i] == message_value(previous, i, 3));
    }
    const P2pCounters& p2p = world.p2p_counters();
    CHECK(p2p.sends.calls == 4);
    CHECK(p2p.sends.bytes == 3 * count * sizeof(float));
    CHECK(p2p.recvs.calls == 4);
    CHECK(p2p.recvs.bytes == 3 * count * sizeof(float));
    CHECK(world.counters().total_calls() == 0);  // not collectives
    const P2pCounters since = world.p2p_counters().since(p2p);
    CHECK(since.sends.calls == 0);
    world.reset_counters();
    CHECK(world.p2p_counters().sends.calls == 0);
    world.barrier();
  }
}

TEST_CASE("send/recv refuse themselves as peer, a peer outside the group and a tag outside [0, 32767]") {
  auto world = make_world(AsyncMechanism::nonblocking);
  float x = 0;
  const auto refused = [&](auto action, const std::string& text) {
    try {
      action();
      FAIL("expected an InternalError");
    } catch (const shardplan::InternalError& error) {
      CHECK(std::string(error.what()).find(text) != std::string::npos);
    }
  };
  refused([&] { world.send(&x, 1, world.rank(), 0).wait(); }, "is not another rank");
  refused([&] { world.recv(&x, 1, world.size(), 0).wait(); }, "is not another rank");
  if (world.size() > 1) {
    const int peer = (world.rank() + 1) % world.size();
    refused([&] { world.send(&x, 1, peer, kMaxP2pTag + 1).wait(); }, "tag 32768");
    refused([&] { world.recv(&x, 1, peer, -1).wait(); }, "tag -1");
    refused([&] { world.send(nullptr, 1, peer, 0).wait(); }, "null buffer");
  }
  CHECK(world.p2p_counters().sends.calls == 0);  // nothing refused was counted
}
