// The GPU executor as seen from `shardplan run`: a plugin loaded only when a run goes to the GPU.
#pragma once

#include <optional>
#include <string>

#include "gpu_plugin_api.h"
#include "run_support.h"

namespace shardplan::cli {

// Note [GPU plugin]: the GPU executor (CUDA kernels, cuBLAS, NCCL) lives in shardplan-gpu.so, which `shardplan` opens
// with dlopen only for `run --device gpu`, or `run --device auto` on a host with an NVIDIA device node. Linking it in
// made every command load the CUDA runtime, cuBLAS, cuBLASLt and NCCL at start-up (219 MiB resident and 75 ms for
// `shardplan estimate`, against 7 MiB and 3 ms without; benchmarks/startup_bench.cpp), and kept a CUDA-enabled
// build from starting at all where those libraries are missing. The plugin is looked for in $SHARDPLAN_GPU_PLUGIN when set, else beside the binary (the
// build tree), else in <libdir>/shardplan/ relative to it (an installed tree). It stays loaded for the process's
// life: CUDA's libraries do not support being unloaded. The plugin repeats the static libraries it needs (the
// runner, MPI communicator, planner), so the two share only libmpi, and exceptions never cross between them: the
// plugin's table returns exit statuses and messages (gpu_plugin_api.h).
class GpuExecutor {
 public:
  // InputError "--device gpu: ..." saying what is missing: no plugin (a build without CUDA, cuBLAS and NCCL), or
  // one that cannot be loaded (the dynamic loader's reason: a missing libcudart, ...), or from another build.
  static GpuExecutor load();
  // For --device auto: the executor when a plugin exists and loads, nothing otherwise (the CPU runs instead).
  static std::optional<GpuExecutor> try_load();

  // The usable CUDA devices; 0 with `reason` set when there are none.
  int device_count(std::string& reason) const;
  // run_on_gpu in the plugin; its errors come back as InputError (status 2) or std::runtime_error (status 1).
  int run(const RunFlags& flags) const;

 private:
  explicit GpuExecutor(const ShardplanGpuPlugin* table) : table_(table) {}
  const ShardplanGpuPlugin* table_;
};

// Whether this host shows an NVIDIA GPU to user space (/dev/nvidiactl, or /dev/dxg under WSL): --device auto loads
// the plugin only then, so CPU runs on GPU-less hosts never map the CUDA libraries.
bool nvidia_device_nodes_present();

}  // namespace shardplan::cli
