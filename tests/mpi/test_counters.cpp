// Collective counters: calls and bytes per kind for one step, per-step differences, reset, per-communicator counts.
#include <doctest/doctest.h>

#include "hybrid_groups.h"
#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

TEST_CASE("counters count the collectives of a step with nccl-tests' message size") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    CAPTURE(to_string(mechanism));
    auto world = make_world(mechanism);
    const std::size_t n = static_cast<std::size_t>(world.size());
    const std::size_t shard = 3;
    std::vector<float> flat(shard * n);
    std::vector<float> grads(shard * n, 1.0f);
    std::vector<float> mine(shard, 1.0f);

    const CommCounters before = world.counters();
    CHECK(before.total_calls() == 0);
    // One FSDP-like step of a two-unit model: two all-gathers (forward), one reduce-scatter, one all-reduce (HSDP),
    // a broadcast and a barrier.
    world.all_gather(mine.data(), shard, flat.data()).wait();
    world.all_gather(mine.data(), shard, flat.data()).wait();
    world.reduce_scatter(grads.data(), mine.data(), shard).wait();
    world.all_reduce(mine.data(), shard).wait();
    world.broadcast(flat.data(), 5, 0).wait();
    world.barrier();
    const CommCounters step = world.counters().since(before);
    CHECK(step.calls(Collective::all_gather) == 2);
    CHECK(step.bytes(Collective::all_gather) == 2 * shard * n * sizeof(float));  // the gathered output
    CHECK(step.calls(Collective::reduce_scatter) == 1);
    CHECK(step.bytes(Collective::reduce_scatter) == shard * n * sizeof(float));  // the full input
    CHECK(step.calls(Collective::all_reduce) == 1);
    CHECK(step.bytes(Collective::all_reduce) == shard * sizeof(float));
    CHECK(step.calls(Collective::broadcast) == 1);
    CHECK(step.bytes(Collective::broadcast) == 5 * sizeof(float));
    CHECK(step.calls(Collective::barrier) == 1);
    CHECK(step.bytes(Collective::barrier) == 0);
    CHECK(step.total_calls() == 6);

    // A zero-count collective is still a collective every rank issued.
    world.all_reduce(nullptr, 0).wait();
    CHECK(world.counters().calls(Collective::all_reduce) == 2);

    world.reset_counters();
    CHECK(world.counters().total_calls() == 0);
    CHECK(world.counters().total_bytes() == 0);
  }
}

TEST_CASE("each communicator counts only its own collectives") {
  auto world = make_world(AsyncMechanism::nonblocking);
  HybridGroups groups = make_hybrid_groups(world, 1);
  float x = 1.0f;
  groups.replica->all_reduce(&x, 1).wait();
  groups.replica->all_reduce(&x, 1).wait();
  groups.shard->barrier();
  CHECK(world.counters().total_calls() == 0);  // splitting is not a counted collective
  CHECK(groups.replica->counters().calls(Collective::all_reduce) == 2);
  CHECK(groups.shard->counters().calls(Collective::barrier) == 1);
  CHECK(groups.shard->counters().calls(Collective::all_reduce) == 0);
  CHECK(std::string(to_string(Collective::reduce_scatter)) == "reduce_scatter");
}
