// The float collectives on device buffers against CPU references: odd counts (0 included), in place, every op, root.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "nccl_bootstrap.h"
#include "nccl_check.h"
#include "nccl_test_support.h"

using namespace shardplan;
using namespace shardplan::gpu;
using namespace shardplan::gpu::testing;

TEST_CASE("nccl: bootstrap") {
  // main() bound the device; binding again is idempotent and agrees with the communicator.
  const LocalDevice local = bind_local_device(MPI_COMM_WORLD);
  CHECK(local.local_rank == world_rank());  // mpirun runs every rank of the test on this one host
  CHECK(local.local_size == world_size());
  CHECK(local.device == device_for_local_rank(local.local_rank, local.device_count));
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  CHECK(current == local.device);

  NcclCommunicator world(MPI_COMM_WORLD);
  CHECK(world.rank() == world_rank());
  CHECK(world.size() == world_size());
  CHECK(world.device() == local.device);
  CHECK(std::string(world.backend_name()) == "nccl");
  std::vector<int> everyone(static_cast<std::size_t>(world_size()));
  for (int r = 0; r < world_size(); ++r) everyone[static_cast<std::size_t>(r)] = r;
  CHECK(world.group().world_ranks == everyone);
  int nccl_rank = -1;
  int nccl_size = 0;
  int nccl_device = -1;
  NCCL_CHECK(ncclCommUserRank(world.native(), &nccl_rank));
  NCCL_CHECK(ncclCommCount(world.native(), &nccl_size));
  NCCL_CHECK(ncclCommCuDevice(world.native(), &nccl_device));
  CHECK(nccl_rank == world.rank());
  CHECK(nccl_size == world.size());
  CHECK(nccl_device == world.device());

  // A second communicator over the same ranks is independent of the first (its own id, streams and NCCL state).
  NcclCommunicator again(MPI_COMM_WORLD);
  CHECK(again.stream(comm::Collective::all_gather) != world.stream(comm::Collective::all_gather));
}

TEST_CASE("nccl: all-gather") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  const int me = world.rank();
  for (const std::size_t count : kOddCounts) {
    CAPTURE(count);
    const std::size_t total = count * static_cast<std::size_t>(n);
    const std::vector<float> expected = with_guard(concatenated(n, count, 1, rank_data));

    // Separate buffers.
    DeviceBuffer<float> send(rank_data(me, count, 1));
    DeviceBuffer<float> recv(with_guard(std::vector<float>(total, kSentinel)));
    world.all_gather(send.get(), count, recv.get()).wait();
    CHECK(recv.download() == expected);

    // In place: this rank's shard already sits at its slot of the gathered buffer, as FSDP keeps it.
    std::vector<float> gathered(total, kSentinel);
    const std::vector<float> mine = rank_data(me, count, 1);
    std::copy(mine.begin(), mine.end(), gathered.begin() + static_cast<std::ptrdiff_t>(count) * me);
    DeviceBuffer<float> in_place(with_guard(gathered));
    world.all_gather(in_place.get() + static_cast<std::size_t>(me) * count, count, in_place.get()).wait();
    CHECK(in_place.download() == expected);
  }
}

TEST_CASE("nccl: reduce-scatter") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  const int me = world.rank();
  for (const comm::ReduceOp op : kOps) {
    for (const std::size_t count : kOddCounts) {
      CAPTURE(comm::to_string(op));
      CAPTURE(count);
      DeviceBuffer<float> send(rank_data(me, count * static_cast<std::size_t>(n), 2));
      DeviceBuffer<float> recv(with_guard(std::vector<float>(count, kSentinel)));
      world.reduce_scatter(send.get(), recv.get(), count, op).wait();
      std::vector<float> expected(count);
      for (std::size_t i = 0; i < count; ++i) {
        const std::size_t at = static_cast<std::size_t>(me) * count + i;
        float acc = value(0, at, 2);
        for (int r = 1; r < n; ++r) acc = reduce(op, acc, value(r, at, 2));
        expected[i] = acc;
      }
      CHECK(recv.download() == with_guard(expected));
    }
  }
}

TEST_CASE("nccl: all-reduce") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  for (const comm::ReduceOp op : kOps) {
    for (const std::size_t count : kOddCounts) {
      CAPTURE(comm::to_string(op));
      CAPTURE(count);
      // The guard travels inside the buffer but outside the count, so it must come back untouched.
      DeviceBuffer<float> buffer(with_guard(rank_data(world.rank(), count, 3)));
      world.all_reduce(buffer.get(), count, op).wait();
      std::vector<float> expected = rank_data(0, count, 3);
      for (int r = 1; r < n; ++r) {
        for (std::size_t i = 0; i < count; ++i) expected[i] = reduce(op, expected[i], value(r, i, 3));
      }
      CHECK(buffer.download() == with_guard(expected));
    }
  }
}

TEST_CASE("nccl: broadcast") {
  NcclCommunicator world(MPI_COMM_WORLD);
  for (int root = 0; root < world.size(); ++root) {
    for (const std::size_t count : kOddCounts) {
      CAPTURE(root);
      CAPTURE(count);
      DeviceBuffer<float> buffer(with_guard(rank_data(world.rank(), count, 4 + root)));
      world.broadcast(buffer.get(), count, root).wait();
      CHECK(buffer.download() == with_guard(rank_data(root, count, 4 + root)));
    }
  }
}
