// The C interface between `shardplan run` and the GPU executor plugin (shardplan-gpu.so): one table of functions that
// the plugin exports under one name (Note [GPU plugin] in gpu_executor.h).
#pragma once

#include <cstddef>

namespace shardplan::cli {
struct RunFlags;
}

// Raised whenever RunFlags or this table changes, so a plugin left from another build is refused, not misread.
#define SHARDPLAN_GPU_PLUGIN_ABI 1

extern "C" {

struct ShardplanGpuPlugin {
  int abi;                     // SHARDPLAN_GPU_PLUGIN_ABI as the plugin was built
  std::size_t run_flags_size;  // sizeof(RunFlags) as the plugin was built
  // The number of usable CUDA devices; 0 with `reason` filled (NUL-terminated, truncated) when none is usable.
  int (*device_count)(char* reason, std::size_t reason_size);
  // `shardplan run` on GPUs (run_on_gpu in cmd_run_gpu.cpp); returns the exit status. On an error the status is 2 (the
  // input) or 1 (internal) and `message` holds the one-line message the CLI prints.
  int (*run)(const shardplan::cli::RunFlags* flags, char* message, std::size_t message_size);
};

// The plugin's one exported symbol.
const ShardplanGpuPlugin* shardplan_gpu_plugin(void);
typedef const ShardplanGpuPlugin* (*ShardplanGpuPluginEntry)(void);

}  // extern "C"
