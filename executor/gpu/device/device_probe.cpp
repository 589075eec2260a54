// probe_devices: asks the CUDA runtime for devices and keeps its own words when there are none.
#include "device_probe.h"

#include <cuda_runtime.h>

namespace shardplan::gpu {

DeviceProbe probe_devices() {
  DeviceProbe probe;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // No driver (cudaErrorInsufficientDriver) or no GPU (cudaErrorNoDevice): the runtime's own name and text.
    probe.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return probe;
  }
  if (count == 0) {
    probe.reason = "cudaGetDeviceCount: 0 devices";
    return probe;
  }
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, 0) == cudaSuccess) {
    probe.name = properties.name;
    probe.compute_capability = properties.major * 10 + properties.minor;
  }
  probe.device_count = count;
  return probe;
}

}  // namespace shardplan::gpu
