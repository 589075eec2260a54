// Errors: invalid arguments and failed MPI calls throw InternalError with the rank and file:line; sessions nest.
#include <doctest/doctest.h>

#include <climits>
#include <string>

#include "errors.h"
#include "mpi_check.h"
#include "mpi_session.h"
#include "mpi_test_support.h"

using namespace shardplan::comm;
using namespace shardplan::comm::testing;

namespace {

// Runs `action`, expecting an InternalError; returns it for inspection.
template <typename Action>
shardplan::InternalError caught(Action action) {
  try {
    action();
  } catch (const shardplan::InternalError& e) {
    return e;
  }
  FAIL("expected an InternalError");
  return shardplan::InternalError("unreachable");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("invalid arguments throw InternalError naming the rank, on every rank, before any MPI call") {
  auto world = make_world(AsyncMechanism::nonblocking);
  std::vector<float> buffer(16, 0.0f);
  const auto null_buffer = caught([&] { world.all_reduce(nullptr, 3); });
  CHECK(null_buffer.rank() == world_rank());
  CHECK(contains(null_buffer.what(), "rank " + std::to_string(world_rank())));
  CHECK(contains(null_buffer.raised_at(), "executor/comm/communicator.cpp:"));

  CHECK_THROWS_AS(world.broadcast(buffer.data(), 1, world.size()), shardplan::InternalError);
  CHECK_THROWS_AS(world.broadcast(buffer.data(), 1, -1), shardplan::InternalError);
  if (world.size() > 1) {
    // send overlapping recv somewhere other than this rank's slot
    const std::size_t other = static_cast<std::size_t>((world.rank() + 1) % world.size());
    CHECK_THROWS_AS(world.all_gather(buffer.data() + other, 1, buffer.data()), shardplan::InternalError);
  }
  CHECK_THROWS_AS(world.reduce_scatter(buffer.data(), buffer.data(), 1), shardplan::InternalError);
  // Past MPI's int counts: rejected before the (never dereferenced) buffer is touched.
  const auto too_big = caught([&] { world.all_reduce(buffer.data(), static_cast<std::size_t>(INT_MAX) + 1); });
  CHECK(contains(too_big.what(), "int count"));
  // Rejected collectives were never issued, so they are not counted.
  CHECK(world.counters().total_calls() == 0);
}

TEST_CASE("a failing MPI call becomes an InternalError with the call, rank, file:line and MPI's message") {
  auto world = make_world(AsyncMechanism::nonblocking);
  float x = 0.0f;
  // An invalid root reaches MPI (our communicator returns errors instead of aborting): MPI_ERR_ROOT.
  const auto error = caught([&] { MPI_CHECK(MPI_Bcast(&x, 1, MPI_FLOAT, world.size() + 5, world.native())); });
  const std::string what = error.what();
  CHECK(contains(what, "MPI_Bcast"));
  CHECK(contains(what, "rank " + std::to_string(world_rank())));
  CHECK(contains(what, "tests/mpi/test_errors.cpp:"));
  CHECK(error.rank() == world_rank());
}

TEST_CASE("a second MpiSession adopts the running MPI instead of initialising it twice") {
  MpiSession inner;
  CHECK_FALSE(inner.owns_mpi());
  CHECK(inner.world_size() == world_size());
  CHECK(inner.provided() == ThreadLevel::multiple);
}

TEST_CASE("mechanism names round-trip and unknown ones are input errors") {
  CHECK(parse_async_mechanism("nonblocking") == AsyncMechanism::nonblocking);
  CHECK(parse_async_mechanism("comm_thread") == AsyncMechanism::comm_thread);
  CHECK_THROWS_AS(parse_async_mechanism("threads"), shardplan::InputError);
}
