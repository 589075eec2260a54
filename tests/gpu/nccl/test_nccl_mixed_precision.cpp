// The typed collectives: bf16 all-gather and reduce-scatter against CPU references, and f32 as the float overload.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>

#include "errors.h"
#include "nccl_test_support.h"

using namespace shardplan;
using namespace shardplan::gpu;
using namespace shardplan::gpu::testing;

namespace {

std::vector<std::uint16_t> bf16_guarded(std::vector<float> data) { return to_bf16(with_guard(std::move(data))); }

}  // namespace

TEST_CASE("nccl: bf16 all-gather") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  const int me = world.rank();
  for (const std::size_t count : kOddCounts) {
    CAPTURE(count);
    const std::size_t total = count * static_cast<std::size_t>(n);
    const std::vector<std::uint16_t> expected = bf16_guarded(concatenated(n, count, 5, small_data));

    DeviceBuffer<std::uint16_t> send(to_bf16(small_data(me, count, 5)));
    DeviceBuffer<std::uint16_t> recv(bf16_guarded(std::vector<float>(total, kSentinel)));
    world.all_gather(send.get(), count, recv.get(), DeviceDataType::bf16).wait();
    CHECK(recv.download() == expected);
    CHECK(from_bf16(recv.download()) == with_guard(concatenated(n, count, 5, small_data)));

    // In place, with the slot offset in bf16 elements (2 bytes), not floats.
    std::vector<float> gathered(total, kSentinel);
    const std::vector<float> mine = small_data(me, count, 5);
    std::copy(mine.begin(), mine.end(), gathered.begin() + static_cast<std::ptrdiff_t>(count) * me);
    DeviceBuffer<std::uint16_t> in_place(bf16_guarded(gathered));
    world.all_gather(in_place.get() + static_cast<std::size_t>(me) * count, count, in_place.get(), DeviceDataType::bf16)
        .wait();
    CHECK(in_place.download() == expected);
  }
}

TEST_CASE("nccl: bf16 reduce-scatter") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  const int me = world.rank();
  for (const comm::ReduceOp op : kOps) {
    for (const std::size_t count : kOddCounts) {
      CAPTURE(comm::to_string(op));
      CAPTURE(count);
      DeviceBuffer<std::uint16_t> send(to_bf16(small_data(me, count * static_cast<std::size_t>(n), 6)));
      DeviceBuffer<std::uint16_t> recv(bf16_guarded(std::vector<float>(count, kSentinel)));
      world.reduce_scatter(send.get(), recv.get(), count, DeviceDataType::bf16, op).wait();
      std::vector<float> expected(count);
      for (std::size_t i = 0; i < count; ++i) {
        const std::size_t at = static_cast<std::size_t>(me) * count + i;
        float acc = small_value(0, at, 6);
        for (int r = 1; r < n; ++r) acc = reduce(op, acc, small_value(r, at, 6));
        expected[i] = acc;
      }
      CHECK(from_bf16(recv.download()) == with_guard(expected));
    }
  }
}

TEST_CASE("nccl: f32 typed collectives are the float ones") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  const std::size_t count = 7;
  DeviceBuffer<float> send(rank_data(world.rank(), count, 8));
  DeviceBuffer<float> recv(count * static_cast<std::size_t>(n));
  world.all_gather(static_cast<const void*>(send.get()), count, static_cast<void*>(recv.get()), DeviceDataType::f32)
      .wait();
  CHECK(recv.download() == concatenated(n, count, 8, rank_data));

  DeviceBuffer<float> grads(rank_data(world.rank(), count * static_cast<std::size_t>(n), 9));
  DeviceBuffer<float> shard(count);
  world.reduce_scatter(static_cast<const void*>(grads.get()), static_cast<void*>(shard.get()), count,
                       DeviceDataType::f32)
      .wait();
  std::vector<float> expected(count, 0.0f);
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      expected[i] += value(r, static_cast<std::size_t>(world.rank()) * count + i, 9);
    }
  }
  CHECK(shard.download() == expected);
  // Counted as the float overloads count: 4 bytes per element.
  CHECK(world.counters().bytes(comm::Collective::all_gather) == count * static_cast<std::size_t>(n) * 4);
  CHECK(world.counters().bytes(comm::Collective::reduce_scatter) == count * static_cast<std::size_t>(n) * 4);
}

TEST_CASE("nccl: typed argument errors") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  DeviceBuffer<std::uint16_t> buffer(8 * static_cast<std::size_t>(n) + 8);
  std::uint16_t* base = buffer.get();
  // Null buffers with a non-zero count.
  CHECK_THROWS_AS(world.all_gather(nullptr, 3, base, DeviceDataType::bf16), InternalError);
  CHECK_THROWS_AS(world.reduce_scatter(base, nullptr, 3, DeviceDataType::bf16), InternalError);
  // Overlap other than in place, measured in bf16 bytes: one element past this rank's slot overlaps.
  const std::size_t slot = static_cast<std::size_t>(world.rank()) * 8;
  CHECK_THROWS_AS(world.all_gather(base + slot + 1, 8, base, DeviceDataType::bf16), InternalError);
  CHECK_THROWS_AS(world.reduce_scatter(base, base + 1, 8, DeviceDataType::bf16), InternalError);
  // Nothing was issued or counted.
  CHECK(world.counters().total_calls() == 0);
  // The same checks pass in place and for zero counts, which reach every rank alike and complete at once.
  world.all_gather(nullptr, 0, nullptr, DeviceDataType::bf16).wait();
  world.reduce_scatter(nullptr, nullptr, 0, DeviceDataType::bf16).wait();
  CHECK(world.counters().calls(comm::Collective::all_gather) == 1);
  CHECK(world.counters().bytes(comm::Collective::all_gather) == 0);
  CHECK(world.counters().calls(comm::Collective::reduce_scatter) == 1);
}
