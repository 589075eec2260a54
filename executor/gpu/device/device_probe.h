// DeviceProbe: whether this process can use a CUDA device, and if not, the reason in words (for skipped GPU tests).
#pragma once

#include <string>

namespace shardplan::gpu {

struct DeviceProbe {
  int device_count = 0;
  std::string name;          // device 0's name when there is one
  int compute_capability = 0;  // device 0's major·10 + minor, e.g. 90 for an H100/H200
  std::string reason;        // why no device is usable, e.g. "cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable
                             // device is detected"; empty when device_count > 0
  bool usable() const { return device_count > 0; }
};

// Never throws: a machine without a driver or a GPU is an answer, not an error.
DeviceProbe probe_devices();

}  // namespace shardplan::gpu
