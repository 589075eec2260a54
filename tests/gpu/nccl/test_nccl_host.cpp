// The host-only parts of the NCCL layer, run on every machine that builds it (no GPU, no MPI): device choice by local
// rank, NCCL_CHECK's message, the typed collectives' element types.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "errors.h"
#include "nccl_bootstrap.h"
#include "nccl_check.h"
#include "nccl_communicator.h"

using namespace shardplan;
using namespace shardplan::gpu;

TEST_CASE("device_for_local_rank: round robin over the host's devices") {
  CHECK(device_for_local_rank(0, 1) == 0);
  CHECK(device_for_local_rank(3, 1) == 0);
  CHECK(device_for_local_rank(1, 2) == 1);
  CHECK(device_for_local_rank(5, 8) == 5);
  CHECK(device_for_local_rank(9, 8) == 1);
  CHECK_THROWS_AS(device_for_local_rank(0, 0), InternalError);
  CHECK_THROWS_AS(device_for_local_rank(-1, 4), InternalError);
}

TEST_CASE("LocalDevice::shared: more ranks on the host than devices") {
  LocalDevice device;
  device.local_size = 2;
  device.device_count = 2;
  CHECK_FALSE(device.shared());
  device.local_size = 3;
  CHECK(device.shared());
}

TEST_CASE("NCCL_CHECK names the call, the rank, the place and NCCL's reason") {
  CHECK_NOTHROW(NCCL_CHECK(ncclSuccess));
  int count = 0;
  try {
    NCCL_CHECK(ncclCommCount(nullptr, &count));  // NCCL rejects a null communicator without touching a device
    FAIL("ncclCommCount accepted a null communicator");
  } catch (const InternalError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("ncclCommCount(nullptr, &count) failed on rank " + std::to_string(nccl_error_rank())) == 0);
    CHECK(message.find("tests/gpu/nccl/test_nccl_host.cpp:") != std::string::npos);
    CHECK(message.find(ncclGetErrorString(ncclInvalidArgument)) != std::string::npos);
    CHECK(message.find("(NCCL error " + std::to_string(static_cast<int>(ncclInvalidArgument)) + ")") !=
          std::string::npos);
    CHECK(e.rank() == nccl_error_rank());
    CHECK(e.raised_at().find("tests/gpu/nccl/test_nccl_host.cpp:") == 0);
  }
  // ncclInProgress only means something on a non-blocking communicator, which this layer never creates.
  CHECK_THROWS_AS(NCCL_CHECK(ncclInProgress), InternalError);
}

TEST_CASE("DeviceDataType: names and element sizes") {
  CHECK(std::string(to_string(DeviceDataType::f32)) == "f32");
  CHECK(std::string(to_string(DeviceDataType::bf16)) == "bf16");
  CHECK(size_of(DeviceDataType::f32) == 4);
  CHECK(size_of(DeviceDataType::bf16) == 2);
}
