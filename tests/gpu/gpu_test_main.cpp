// main() of every `gpu` suite program: runs doctest when a CUDA device is usable, otherwise reports the test as
// skipped (exit status 77, Meson's skip code) with the CUDA runtime's reason, so a machine without a GPU shows each GPU
// test as SKIP with why, never as passed and never silently absent.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "device_probe.h"

int main(int argc, char** argv) {
  shardplan::gpu::DeviceProbe probe = shardplan::gpu::probe_devices();
  if (!probe.usable()) {
    std::printf("SKIP: no usable CUDA device (%s)\n", probe.reason.c_str());
    return 77;
  }
  std::printf("CUDA device 0: %s (sm_%d), %d device(s)\n", probe.name.c_str(), probe.compute_capability,
              probe.device_count);
  doctest::Context context(argc, argv);
  return context.run();
}
