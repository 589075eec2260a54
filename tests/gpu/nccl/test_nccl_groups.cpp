// Split into HSDP groups (ncclCommSplit), collective counters, barrier, and the checks shared with every backend.
#include <doctest/doctest.h>

#include <numeric>
#include <string>

#include "errors.h"
#include "hybrid_groups.h"
#include "nccl_check.h"
#include "nccl_test_support.h"

using namespace shardplan;
using namespace shardplan::gpu;
using namespace shardplan::gpu::testing;

namespace {

// Gathers every member's world rank inside `group` and sums them across it, on the device.
void check_group_collectives(comm::Communicator& group) {
  const std::vector<int>& members = group.group().world_ranks;
  const float me = static_cast<float>(members.at(static_cast<std::size_t>(group.rank())));
  DeviceBuffer<float> mine(std::vector<float>{me});
  DeviceBuffer<float> gathered(static_cast<std::size_t>(group.size()));
  group.all_gather(mine.get(), 1, gathered.get()).wait();
  CHECK(gathered.download() == std::vector<float>(members.begin(), members.end()));
  group.all_reduce(mine.get(), 1).wait();
  CHECK(mine.download() == std::vector<float>{static_cast<float>(std::accumulate(members.begin(), members.end(), 0))});
}

}  // namespace

TEST_CASE("nccl: split into groups") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  const int me = world.rank();

  // Every factorisation of the world into replicas × shard groups (2x2 of 4, 3x1 and 1x3 of 3, ...).
  for (int g = 1; g <= n; ++g) {
    if (n % g != 0) continue;
    CAPTURE(g);
    comm::HybridGroups groups = comm::make_hybrid_groups(world, g);
    std::vector<int> shard(static_cast<std::size_t>(g));
    std::iota(shard.begin(), shard.end(), me / g * g);
    std::vector<int> replica;
    for (int r = me % g; r < n; r += g) replica.push_back(r);
    CHECK(groups.shard->group().world_ranks == shard);
    CHECK(groups.shard->rank() == me % g);
    CHECK(groups.replica->group().world_ranks == replica);
    CHECK(groups.replica->rank() == me / g);
    for (comm::Communicator* child : {groups.shard.get(), groups.replica.get()}) {
      auto* nccl = dynamic_cast<NcclCommunicator*>(child);
      REQUIRE(nccl != nullptr);  // a split keeps the backend
      CHECK(nccl->device() == world.device());
      int nccl_rank = -1;
      NCCL_CHECK(ncclCommUserRank(nccl->native(), &nccl_rank));
      CHECK(nccl_rank == child->rank());
      check_group_collectives(*child);
    }
  }

  // The key orders the new ranks: reversed keys reverse the group; a child splits again.
  std::unique_ptr<comm::Communicator> reversed = world.split(0, -me);
  CHECK(reversed->rank() == n - 1 - me);
  std::vector<int> backwards(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) backwards[static_cast<std::size_t>(r)] = n - 1 - r;
  CHECK(reversed->group().world_ranks == backwards);
  check_group_collectives(*reversed);
  std::unique_ptr<comm::Communicator> alone = reversed->split(me, 0);
  CHECK(alone->size() == 1);
  CHECK(alone->group().world_ranks == std::vector<int>{me});
  check_group_collectives(*alone);
}

TEST_CASE("nccl: counters") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const std::size_t n = static_cast<std::size_t>(world.size());
  const std::size_t shard = 3;
  DeviceBuffer<float> flat(shard * n);
  DeviceBuffer<float> grads(std::vector<float>(shard * n, 1.0f));
  DeviceBuffer<float> mine(std::vector<float>(shard, 1.0f));
  DeviceBuffer<std::uint16_t> flat_bf16(shard * n);
  DeviceBuffer<std::uint16_t> mine_bf16(to_bf16(std::vector<float>(shard, 1.0f)));
  DeviceBuffer<float> five(std::vector<float>(5, 2.0f));

  const comm::CommCounters before = world.counters();
  CHECK(before.total_calls() == 0);
  // One mixed-precision FSDP-like step: a float and a bf16 all-gather, a float and a bf16 reduce-scatter, an
  // all-reduce (HSDP), a broadcast and a barrier.
  world.all_gather(mine.get(), shard, flat.get()).wait();
  world.all_gather(mine_bf16.get(), shard, flat_bf16.get(), DeviceDataType::bf16).wait();
  world.reduce_scatter(grads.get(), mine.get(), shard).wait();
  world.reduce_scatter(flat_bf16.get(), mine_bf16.get(), shard, DeviceDataType::bf16).wait();
  world.all_reduce(mine.get(), shard).wait();
  world.broadcast(five.get(), 5, 0).wait();
  world.barrier();
  const comm::CommCounters step = world.counters().since(before);
  CHECK(step.calls(comm::Collective::all_gather) == 2);
  CHECK(step.bytes(comm::Collective::all_gather) == shard * n * (4 + 2));  // the gathered outputs, f32 + bf16
  CHECK(step.calls(comm::Collective::reduce_scatter) == 2);
  CHECK(step.bytes(comm::Collective::reduce_scatter) == shard * n * (4 + 2));  // the full inputs
  CHECK(step.calls(comm::Collective::all_reduce) == 1);
  CHECK(step.bytes(comm::Collective::all_reduce) == shard * 4);
  CHECK(step.calls(comm::Collective::broadcast) == 1);
  CHECK(step.bytes(comm::Collective::broadcast) == 5 * 4);
  CHECK(step.calls(comm::Collective::barrier) == 1);
  CHECK(step.total_calls() == 7);

  // A zero-count collective is still a collective every rank issued.
  world.all_reduce(nullptr, 0).wait();
  CHECK(world.counters().calls(comm::Collective::all_reduce) == 2);

  // Each communicator counts its own: a split child starts at zero and the parent does not see its calls.
  std::unique_ptr<comm::Communicator> child = world.split(0, world.rank());
  CHECK(child->counters().total_calls() == 0);
  child->all_reduce(mine.get(), shard).wait();
  CHECK(child->counters().calls(comm::Collective::all_reduce) == 1);
  CHECK(world.counters().calls(comm::Collective::all_reduce) == 2);

  world.reset_counters();
  CHECK(world.counters().total_calls() == 0);
  CHECK(world.counters().total_bytes() == 0);
}

TEST_CASE("nccl: barrier") {
  NcclCommunicator world(MPI_COMM_WORLD);
  for (int i = 0; i < 3; ++i) world.barrier();
  CHECK(world.counters().calls(comm::Collective::barrier) == 3);
  // The communicator still works after barriers (they run on the MPI duplicate, not on NCCL).
  DeviceBuffer<float> one(std::vector<float>{1.0f});
  world.all_reduce(one.get(), 1).wait();
  CHECK(one.download() == std::vector<float>{static_cast<float>(world.size())});
}

TEST_CASE("nccl: argument errors") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const std::size_t n = static_cast<std::size_t>(world.size());
  DeviceBuffer<float> buffer(8 * n + 8);
  float* base = buffer.get();
  CHECK_THROWS_AS(world.all_gather(nullptr, 3, base), InternalError);
  CHECK_THROWS_AS(world.reduce_scatter(base, nullptr, 3), InternalError);
  CHECK_THROWS_AS(world.all_reduce(nullptr, 3), InternalError);
  CHECK_THROWS_AS(world.broadcast(base, 3, world.size()), InternalError);
  CHECK_THROWS_AS(world.broadcast(base, 3, -1), InternalError);
  CHECK_THROWS_AS(world.all_gather(base + static_cast<std::size_t>(world.rank()) * 8 + 1, 8, base), InternalError);
  CHECK_THROWS_AS(world.reduce_scatter(base, base + 1, 8), InternalError);
  CHECK_THROWS_AS(world.split(-1, 0), InternalError);
  // The message names the backend and the rank.
  try {
    world.all_reduce(nullptr, 3);
    FAIL("no error");
  } catch (const InternalError& e) {
    CHECK(std::string(e.what()).find("nccl communicator (rank " + std::to_string(world_rank()) + ")") !=
          std::string::npos);
    CHECK(e.rank() == world_rank());
  }
  CHECK(world.counters().total_calls() == 0);  // nothing failed was issued or counted
}
