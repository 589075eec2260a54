// Asynchronous handles (test / wait / drop) and stream ordering with a compute stream through stream(kind) and events.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "errors.h"
#include "nccl_test_support.h"

using namespace shardplan;
using namespace shardplan::gpu;
using namespace shardplan::gpu::testing;

namespace {

// Pinned host memory: a cudaMemcpyAsync from it reads the bytes when the copy runs on its stream, not when it is
// enqueued (pageable memory is staged at the call), so a host function earlier on the stream can still fill it.
class PinnedFloats {
 public:
  explicit PinnedFloats(std::size_t count) : count_(count) {
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count_ * sizeof(float)));
  }
  ~PinnedFloats() { cudaFreeHost(data_); }
  PinnedFloats(const PinnedFloats&) = delete;
  PinnedFloats& operator=(const PinnedFloats&) = delete;
  float* get() const { return data_; }
  std::vector<float> values() const { return std::vector<float>(data_, data_ + count_); }

 private:
  float* data_ = nullptr;
  std::size_t count_;
};

// A host function on a stream that sleeps and then (optionally) fills a pinned buffer: work the stream takes a while
// to get through, without a kernel.
struct SlowFill {
  float* destination = nullptr;
  const std::vector<float>* source = nullptr;
  static void CUDART_CB run(void* self) {
    auto* fill = static_cast<SlowFill*>(self);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (fill->destination != nullptr) {
      std::memcpy(fill->destination, fill->source->data(), fill->source->size() * sizeof(float));
    }
  }
};

class Event {
 public:
  Event() { CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

TEST_CASE("nccl: async handle test and wait") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  const int me = world.rank();

  SUBCASE("poll test() until the collective completes, then wait and test are idempotent") {
    const std::size_t count = (1u << 20) + 1;  // 4 MiB per rank: long enough to be seen in flight on a slow link
    DeviceBuffer<float> send(rank_data(me, count, 10));
    DeviceBuffer<float> recv(count * static_cast<std::size_t>(n));
    comm::CommHandle handle = world.all_gather(send.get(), count, recv.get());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!handle.test()) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::yield();
    }
    CHECK(handle.done());
    CHECK(handle.test());
    handle.wait();
    handle.wait();
    CHECK(recv.download() == concatenated(n, count, 10, rank_data));
  }

  SUBCASE("several collectives in flight on both streams, waited in reverse order") {
    constexpr int kInFlight = 4;  // FSDP prefetches more than one unit ahead
    const std::size_t count = 1001;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> sends;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> recvs;
    for (int u = 0; u < kInFlight; ++u) {
      sends.push_back(std::make_unique<DeviceBuffer<float>>(rank_data(me, count, 20 + u)));
      recvs.push_back(std::make_unique<DeviceBuffer<float>>(count * static_cast<std::size_t>(n)));
    }
    DeviceBuffer<float> grads(rank_data(me, count * static_cast<std::size_t>(n), 30));
    DeviceBuffer<float> shard(count);
    std::vector<comm::CommHandle> handles;
    for (int u = 0; u < kInFlight; ++u) {
      const auto i = static_cast<std::size_t>(u);
      handles.push_back(world.all_gather(sends[i]->get(), count, recvs[i]->get()));
      if (u == 1) handles.push_back(world.reduce_scatter(grads.get(), shard.get(), count));
    }
    for (auto it = handles.rbegin(); it != handles.rend(); ++it) it->wait();
    for (int u = 0; u < kInFlight; ++u) {
      CHECK(recvs[static_cast<std::size_t>(u)]->download() == concatenated(n, count, 20 + u, rank_data));
    }
    std::vector<float> expected(count, 0.0f);
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) expected[i] += value(r, static_cast<std::size_t>(me) * count + i, 30);
    }
    CHECK(shard.download() == expected);
  }

  SUBCASE("a dropped or overwritten handle waits for its collective (Note [Dropping a handle])") {
    const std::size_t count = 7;
    DeviceBuffer<float> a(rank_data(me, count, 40));
    DeviceBuffer<float> b(rank_data(me, count, 41));
    {
      comm::CommHandle dropped = world.all_reduce(a.get(), count);
    }  // waits here
    comm::CommHandle handle = world.all_reduce(b.get(), count);
    handle = comm::CommHandle();  // waits for the all-reduce it held
    CHECK(handle.done());
    std::vector<float> expected_a(count, 0.0f);
    std::vector<float> expected_b(count, 0.0f);
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) {
        expected_a[i] += value(r, i, 40);
        expected_b[i] += value(r, i, 41);
      }
    }
    CHECK(a.download() == expected_a);
    CHECK(b.download() == expected_b);
  }

  SUBCASE("a zero-count collective's handle is complete at once") {
    comm::CommHandle handle = world.all_reduce(nullptr, 0);
    CHECK(handle.done());
    CHECK(handle.test());
  }
}

TEST_CASE("nccl: collective streams") {
  NcclCommunicator world(MPI_COMM_WORLD);
  const cudaStream_t gather = world.stream(comm::Collective::all_gather);
  const cudaStream_t reduce = world.stream(comm::Collective::reduce_scatter);
  CHECK(gather != nullptr);
  CHECK(reduce != nullptr);
  CHECK(gather != reduce);
  CHECK(world.stream(comm::Collective::broadcast) == gather);
  CHECK(world.stream(comm::Collective::all_reduce) == reduce);
  CHECK_THROWS_AS(world.stream(comm::Collective::barrier), InternalError);
  for (const cudaStream_t stream : {gather, reduce}) {
    unsigned flags = 0;
    CUDA_CHECK(cudaStreamGetFlags(stream, &flags));
    CHECK(flags == cudaStreamNonBlocking);
    int priority = 0;
    int least = 0;
    int greatest = 0;
    CUDA_CHECK(cudaStreamGetPriority(stream, &priority));
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CHECK(priority == std::clamp(-1, greatest, least));
  }
}

TEST_CASE("nccl: stream ordering with a compute stream") {
  // The runner's pattern, with no host synchronisation between producing, reducing and consuming: the collective
  // waits for the compute stream's upload through an event, and the compute stream waits for the collective through
  // another. Both producers are slow (200 ms host functions), so a missing dependency reads stale data.
  NcclCommunicator world(MPI_COMM_WORLD);
  const int n = world.size();
  const std::size_t count = 1001;
  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  {
    const std::vector<float> mine = rank_data(world.rank(), count, 50);
    PinnedFloats staged(count);
    PinnedFloats result(count);
    std::fill(staged.get(), staged.get() + count, kSentinel);
    DeviceBuffer<float> buffer(std::vector<float>(count, kSentinel));
    Event uploaded;
    Event reduced;

    SlowFill fill{staged.get(), &mine};
    CUDA_CHECK(cudaLaunchHostFunc(compute, &SlowFill::run, &fill));
    CUDA_CHECK(cudaMemcpyAsync(buffer.get(), staged.get(), count * sizeof(float), cudaMemcpyHostToDevice, compute));
    CUDA_CHECK(cudaEventRecord(uploaded.get(), compute));

    const cudaStream_t stream = world.stream(comm::Collective::all_reduce);
    CUDA_CHECK(cudaStreamWaitEvent(stream, uploaded.get(), 0));
    SlowFill delay;  // the collective's stream is slow too, so the consumer must really wait for it
    CUDA_CHECK(cudaLaunchHostFunc(stream, &SlowFill::run, &delay));
    comm::CommHandle handle = world.all_reduce(buffer.get(), count);
    CUDA_CHECK(cudaEventRecord(reduced.get(), stream));

    CUDA_CHECK(cudaStreamWaitEvent(compute, reduced.get(), 0));
    CUDA_CHECK(cudaMemcpyAsync(result.get(), buffer.get(), count * sizeof(float), cudaMemcpyDeviceToHost, compute));
    CUDA_CHECK(cudaStreamSynchronize(compute));

    std::vector<float> expected(count, 0.0f);
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) expected[i] += value(r, i, 50);
    }
    CHECK(result.values() == expected);
    CHECK(handle.test());  // the compute stream saw the collective's end, so its event has completed too
  }
  CUDA_CHECK(cudaStreamDestroy(compute));
}
