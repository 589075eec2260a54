// GPU tests of the device layer: the CUDA pool backend under the DevicePool's accounting, and event timing.
#include <doctest/doctest.h>

#include <vector>

#include "cuda_check.h"
#include "cuda_pool_backend.h"
#include "device_pool.h"
#include "errors.h"
#include "op_timer.h"

using namespace shardplan;
using namespace shardplan::gpu;

namespace {
struct Streams {
  cudaStream_t a = nullptr, b = nullptr;
  Streams() {
    CUDA_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  }
  ~Streams() {
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }
};
}  // namespace

TEST_CASE("device: pool backend allocates stream-ordered memory that the tracker accounts by category") {
  Streams streams;
  runner::StepClock clock;
  runner::TrackingAllocator tracker(0, clock);
  CudaPoolBackend backend(0);
  DevicePool pool(backend, tracker);
  backend.reset_used_high();
  const std::int64_t bytes = 64 << 20;
  {
    DeviceBuffer gathered = pool.allocate(MemoryCategory::unsharded_params, bytes, stream_ref(streams.a));
    REQUIRE(gathered.data() != nullptr);
    CUDA_CHECK(cudaMemsetAsync(gathered.data(), 0, static_cast<std::size_t>(bytes), streams.a));
    cudaEvent_t written;
    CUDA_CHECK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(written, streams.a));
    CUDA_CHECK(cudaStreamWaitEvent(streams.b, written));
    std::vector<float> host(16, 1.0f);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), gathered.data(), host.size() * sizeof(float), cudaMemcpyDeviceToHost,
                               streams.b));
    gathered.release_after(stream_ref(streams.b));  // the last user is stream b
    CUDA_CHECK(cudaStreamSynchronize(streams.b));
    CHECK(host[0] == 0.0f);
    CUDA_CHECK(cudaEventDestroy(written));
  }
  CHECK(tracker.current_total() == 0);
  CHECK(tracker.peak_total() == bytes);
  CHECK(backend.used_high_bytes() >= static_cast<std::size_t>(bytes));
  CHECK(backend.reserved_bytes() >= static_cast<std::size_t>(bytes));  // kept for reuse (release threshold)
}

TEST_CASE("device: op timer places ops of two streams on one clock") {
  Streams streams;
  OpTimer timer(2);
  const std::size_t bytes = 256u << 20;
  void* buffer = nullptr;
  CUDA_CHECK(cudaMalloc(&buffer, bytes));
  timer.start_step(streams.a);
  timer.begin(0, streams.a);
  CUDA_CHECK(cudaMemsetAsync(buffer, 1, bytes, streams.a));
  timer.end(0, streams.a);
  cudaEvent_t first_done;
  CUDA_CHECK(cudaEventCreateWithFlags(&first_done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(first_done, streams.a));
  CUDA_CHECK(cudaStreamWaitEvent(streams.b, first_done));
  timer.begin(1, streams.b);
  CUDA_CHECK(cudaMemsetAsync(buffer, 2, bytes, streams.b));
  timer.end(1, streams.b);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto intervals = timer.read();
  REQUIRE(intervals.size() == 2);
  CHECK(intervals[0].start_s >= 0.0);
  CHECK(intervals[0].end_s > intervals[0].start_s);
  CHECK(intervals[1].start_s >= intervals[0].end_s - 1e-6);  // ordered by the event wait
  CHECK(intervals[1].end_s > intervals[1].start_s);
  CUDA_CHECK(cudaEventDestroy(first_done));
  CUDA_CHECK(cudaFree(buffer));
}

TEST_CASE("device: a failing CUDA call throws an InternalError naming the call and file:line") {
  void* pointer = nullptr;
  try {
    CUDA_CHECK(cudaMalloc(&pointer, static_cast<std::size_t>(1) << 62));  // 4 EiB: cudaErrorMemoryAllocation
    FAIL("expected an error");
  } catch (const InternalError& error) {
    const std::string message = error.what();
    CHECK(message.find("cudaMalloc") != std::string::npos);
    CHECK(message.find("test_gpu_device.cpp:") != std::string::npos);
    CHECK(message.find("cudaErrorMemoryAllocation") != std::string::npos);
  }
  cudaGetLastError();
}
