// Sub-groups for hybrid shard: shard groups of consecutive ranks, replica groups of strided ranks, HSDP's reduction.
#include <doctest/doctest.h>

#include <numeric>

#include "errors.h"
#include "hybrid_groups.h"
#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

namespace {

std::vector<int> expected_shard_members(int world_rank, int group_size) {
  std::vector<int> members(static_cast<std::size_t>(group_size));
  std::iota(members.begin(), members.end(), world_rank / group_size * group_size);
  return members;
}

std::vector<int> expected_replica_members(int world_rank, int world_size, int group_size) {
  std::vector<int> members;
  for (int r = world_rank % group_size; r < world_size; r += group_size) members.push_back(r);
  return members;
}

}  // namespace

TEST_CASE("hybrid groups for every factorisation of the world (2x2 of 4, 3x1 and 1x3 of 3, ...)") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    auto world = make_world(mechanism);
    const int n = world.size();
    for (int g = 1; g <= n; ++g) {
      if (n % g != 0) continue;
      CAPTURE(to_string(mechanism));
      CAPTURE(g);
      HybridGroups groups = make_hybrid_groups(world, g);
      const std::vector<int> shard = expected_shard_members(world.rank(), g);
      const std::vector<int> replica = expected_replica_members(world.rank(), n, g);
      CHECK(groups.shard->group().world_ranks == shard);
      CHECK(groups.shard->size() == g);
      CHECK(groups.shard->rank() == world.rank() % g);
      CHECK(groups.replica->group().world_ranks == replica);
      CHECK(groups.replica->size() == n / g);
      CHECK(groups.replica->rank() == world.rank() / g);

      // Collectives inside each group see only its members: gather their world ranks, sum them.
      const float me = static_cast<float>(world.rank());
      std::vector<float> gathered(static_cast<std::size_t>(g));
      groups.shard->all_gather(&me, 1, gathered.data()).wait();
      CHECK(gathered == std::vector<float>(shard.begin(), shard.end()));
      float sum = me;
      groups.replica->all_reduce(&sum, 1).wait();
      CHECK(sum == static_cast<float>(std::accumulate(replica.begin(), replica.end(), 0)));
    }
  }
}

TEST_CASE("the 2x2 and 3-rank layouts are the ones HSDP expects") {
  auto world = make_world(AsyncMechanism::nonblocking);
  const int r = world.rank();
  if (world.size() == 4) {
    auto shard = make_shard_group(world, 2);
    auto replica = make_replica_group(world, 2);
    CHECK(shard->group().world_ranks == (r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
    CHECK(replica->group().world_ranks == (r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}));
  }
  if (world.size() == 3) {
    CHECK(make_shard_group(world, 3)->group().world_ranks == std::vector<int>{0, 1, 2});    // 3x1: one shard group
    CHECK(make_replica_group(world, 3)->group().world_ranks == std::vector<int>{r});        // of three replicas of 1
    CHECK(make_shard_group(world, 1)->group().world_ranks == std::vector<int>{r});          // 1x3: unsharded,
    CHECK(make_replica_group(world, 1)->group().world_ranks == std::vector<int>{0, 1, 2});  // replicated three times
  }
}

TEST_CASE("HSDP: reduce-scatter in the shard group then all-reduce across replicas equals a world reduce-scatter") {
  for (const AsyncMechanism mechanism : kMechanisms) {
    auto world = make_world(mechanism);
    const int n = world.size();
    for (int g = 1; g <= n; ++g) {
      if (n % g != 0) continue;
      CAPTURE(to_string(mechanism));
      CAPTURE(g);
      HybridGroups groups = make_hybrid_groups(world, g);
      const std::size_t shard_count = 5;  // odd on purpose
      const std::size_t flat_count = shard_count * static_cast<std::size_t>(g);
      const std::vector<float> grads = rank_data(world.rank(), flat_count, 6);
      std::vector<float> shard(shard_count);
      groups.shard->reduce_scatter(grads.data(), shard.data(), shard_count).wait();
      groups.replica->all_reduce(shard.data(), shard_count).wait();
      // Reference: the sum over the whole world of block (rank within shard group).
      std::vector<float> expected(shard_count, 0.0f);
      const std::size_t block = static_cast<std::size_t>(groups.shard->rank()) * shard_count;
      for (int r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < shard_count; ++i) expected[i] += value(r, block + i, 6);
      }
      CHECK(shard == expected);
    }
  }
}

TEST_CASE("group sizes that do not divide the world and negative colours are rejected on every rank") {
  auto world = make_world(AsyncMechanism::nonblocking);
  CHECK_THROWS_AS(make_shard_group(world, world.size() + 1), shardplan::InternalError);
  CHECK_THROWS_AS(make_replica_group(world, 0), shardplan::InternalError);
  CHECK_THROWS_AS(world.split(-1, 0), shardplan::InternalError);
}
