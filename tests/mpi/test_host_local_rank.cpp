// Host-local rank (pure function on synthetic host lists, and over MPI on this one host) and the byte-blob broadcast.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "errors.h"
#include "host_local_rank.h"
#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

namespace {

// Every rank's HostLocalRank for one list of host hashes.
std::vector<std::array<int, 2>> all_local_ranks(const std::vector<std::uint64_t>& hashes) {
  std::vector<std::array<int, 2>> result;
  for (int r = 0; r < static_cast<int>(hashes.size()); ++r) {
    const HostLocalRank local = host_local_rank(hashes, r);
    result.push_back({local.rank, local.size});
  }
  return result;
}

}  // namespace

TEST_CASE("host_local_rank over synthetic host lists") {
  const std::uint64_t a = host_name_hash("node-a");
  const std::uint64_t b = host_name_hash("node-b");
  const std::uint64_t c = host_name_hash("node-c");
  REQUIRE(a != b);
  REQUIRE(b != c);

  SUBCASE("one host: local rank is the rank") {
    CHECK(all_local_ranks({a, a, a, a}) == std::vector<std::array<int, 2>>{{0, 4}, {1, 4}, {2, 4}, {3, 4}});
  }
  SUBCASE("a single rank") { CHECK(all_local_ranks({c}) == std::vector<std::array<int, 2>>{{0, 1}}); }
  SUBCASE("two hosts, blocks of consecutive ranks (mpirun --map-by node:PE or by slot)") {
    CHECK(all_local_ranks({a, a, b, b}) == std::vector<std::array<int, 2>>{{0, 2}, {1, 2}, {0, 2}, {1, 2}});
  }
  SUBCASE("two hosts interleaved (mpirun --map-by node, round robin)") {
    CHECK(all_local_ranks({a, b, a, b, a}) ==
          std::vector<std::array<int, 2>>{{0, 3}, {0, 2}, {1, 3}, {1, 2}, {2, 3}});
  }
  SUBCASE("three hosts of unequal sizes") {
    CHECK(all_local_ranks({c, a, a, b, c, a}) ==
          std::vector<std::array<int, 2>>{{0, 2}, {0, 3}, {1, 3}, {0, 1}, {1, 2}, {2, 3}});
  }
  SUBCASE("a rank outside the list is an internal error") {
    CHECK_THROWS_AS(host_local_rank(std::vector<std::uint64_t>{a, a}, 2), shardplan::InternalError);
    CHECK_THROWS_AS(host_local_rank(std::vector<std::uint64_t>{a}, -1), shardplan::InternalError);
    CHECK_THROWS_AS(host_local_rank(std::vector<std::uint64_t>{}, 0), shardplan::InternalError);
  }
}

TEST_CASE("host_name_hash is FNV-1a 64 (the same value in every process and build)") {
  CHECK(host_name_hash("") == 14695981039346656037ULL);
  CHECK(host_name_hash("a") == 0xaf63dc4c8601ec8cULL);  // FNV-1a 64 test vector
  CHECK(host_name_hash("node-a") != host_name_hash("node-b"));
}

TEST_CASE("host_local_rank over MPI: every rank of this job runs on this one host") {
  const HostLocalRank local = host_local_rank(MPI_COMM_WORLD);
  CHECK(local.rank == world_rank());
  CHECK(local.size == world_size());
  CHECK(!this_host_name().empty());

  // On a sub-communicator the local rank is the rank inside it: split the world into even and odd ranks.
  MPI_Comm half = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half) == MPI_SUCCESS);
  int half_rank = -1;
  int half_size = 0;
  MPI_Comm_rank(half, &half_rank);
  MPI_Comm_size(half, &half_size);
  const HostLocalRank in_half = host_local_rank(half);
  CHECK(in_half.rank == half_rank);
  CHECK(in_half.size == half_size);
  MPI_Comm_free(&half);
}

TEST_CASE("broadcast_bytes: every rank receives the root's bytes") {
  const int n = world_size();
  const int me = world_rank();
  for (int root = 0; root < n; ++root) {
    CAPTURE(root);
    // 128 bytes like an ncclUniqueId, and an odd size; the root's bytes differ from everyone else's.
    for (const std::size_t bytes : {std::size_t{128}, std::size_t{7}, std::size_t{1}}) {
      CAPTURE(bytes);
      std::vector<unsigned char> blob(bytes);
      for (std::size_t i = 0; i < bytes; ++i) blob[i] = static_cast<unsigned char>((me * 31 + i * 7) & 0xff);
      broadcast_bytes(MPI_COMM_WORLD, blob.data(), blob.size(), root);
      std::vector<unsigned char> expected(bytes);
      for (std::size_t i = 0; i < bytes; ++i) expected[i] = static_cast<unsigned char>((root * 31 + i * 7) & 0xff);
      CHECK(blob == expected);
    }
  }
  // Nothing to send is fine, with or without a buffer.
  broadcast_bytes(MPI_COMM_WORLD, nullptr, 0, 0);

  // broadcast_object: a struct the size of an ncclUniqueId (char internal[128]) created on rank 0.
  struct Id {
    char internal[128];
  };
  Id id{};
  for (std::size_t i = 0; i < sizeof id.internal; ++i) {
    id.internal[i] = static_cast<char>(me == 0 ? static_cast<int>(i) : -1);
  }
  broadcast_object(MPI_COMM_WORLD, id, 0);
  for (std::size_t i = 0; i < sizeof id.internal; ++i) CHECK(id.internal[i] == static_cast<char>(i));
}

TEST_CASE("broadcast_bytes rejects a root outside the communicator and a null buffer") {
  unsigned char byte = 0;
  CHECK_THROWS_AS(broadcast_bytes(MPI_COMM_WORLD, &byte, 1, world_size()), shardplan::InternalError);
  CHECK_THROWS_AS(broadcast_bytes(MPI_COMM_WORLD, &byte, 1, -1), shardplan::InternalError);
  CHECK_THROWS_AS(broadcast_bytes(MPI_COMM_WORLD, nullptr, 1, 0), shardplan::InternalError);
}
