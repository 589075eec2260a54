// Finding and loading the GPU executor plugin (Note [GPU plugin]) and calling through its table.
#include "gpu_executor.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "errors.h"

#ifndef SHARDPLAN_GPU_PLUGIN_DIR_FROM_BINDIR
#define SHARDPLAN_GPU_PLUGIN_DIR_FROM_BINDIR "../lib/shardplan"
#endif

namespace shardplan::cli {
namespace {

constexpr const char* kPluginFile = "shardplan-gpu.so";
constexpr std::size_t kMessageSize = 4096;

namespace fs = std::filesystem;

// Where the plugin may be, in the order tried.
std::vector<std::string> plugin_candidates() {
  if (const char* path = std::getenv("SHARDPLAN_GPU_PLUGIN"); path != nullptr && *path != '\0') return {path};
  std::error_code error;
  const fs::path binary = fs::read_symlink("/proc/self/exe", error);
  if (error) return {};
  const fs::path dir = binary.parent_path();
  const fs::path installed(SHARDPLAN_GPU_PLUGIN_DIR_FROM_BINDIR);
  return {(dir / kPluginFile).string(),
          ((installed.is_absolute() ? installed : dir / installed) / kPluginFile).lexically_normal().string()};
}

// The plugin's table, or the reason it cannot be had.
const ShardplanGpuPlugin* open_plugin(std::string& problem) {
  const std::vector<std::string> candidates = plugin_candidates();
  std::string looked;
  for (const std::string& path : candidates) {
    std::error_code error;
    if (!fs::exists(path, error)) {
      looked += (looked.empty() ? "" : ", ") + path;
      continue;
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      problem = "cannot load the GPU executor " + path + " (" + (why ? why : "unknown reason") +
                "): install the CUDA runtime, cuBLAS and NCCL it was built with, or use --device cpu";
      return nullptr;
    }
    const auto entry = reinterpret_cast<ShardplanGpuPluginEntry>(::dlsym(handle, "shardplan_gpu_plugin"));
    const ShardplanGpuPlugin* table = entry != nullptr ? entry() : nullptr;
    if (table == nullptr || table->abi != SHARDPLAN_GPU_PLUGIN_ABI || table->run_flags_size != sizeof(RunFlags)) {
      problem = "the GPU executor " + path + " comes from another build of shardplan (rebuild it with this one)";
      return nullptr;
    }
    return table;
  }
  problem = "this shardplan has no GPU executor (looked for " + (looked.empty() ? std::string(kPluginFile) : looked) +
            "; it is built where meson finds nvcc, cuBLAS, NCCL and MPI)";
  return nullptr;
}

}  // namespace

GpuExecutor GpuExecutor::load() {
  std::string problem;
  const ShardplanGpuPlugin* table = open_plugin(problem);
  if (table == nullptr) throw InputError("--device gpu: " + problem);
  return GpuExecutor(table);
}

std::optional<GpuExecutor> GpuExecutor::try_load() {
  std::string problem;
  const ShardplanGpuPlugin* table = open_plugin(problem);
  if (table == nullptr) return std::nullopt;
  return GpuExecutor(table);
}

int GpuExecutor::device_count(std::string& reason) const {
  std::vector<char> buffer(kMessageSize, '\0');
  const int count = table_->device_count(buffer.data(), buffer.size());
  reason = buffer.data();
  return count;
}

int GpuExecutor::run(const RunFlags& flags) const {
  std::vector<char> buffer(kMessageSize, '\0');
  const int status = table_->run(&flags, buffer.data(), buffer.size());
  if (status == 2) throw InputError(buffer.data());
  if (status != 0 && buffer[0] != '\0') throw std::runtime_error(buffer.data());
  return status;
}

bool nvidia_device_nodes_present() {
  return ::access("/dev/nvidiactl", F_OK) == 0 || ::access("/dev/dxg", F_OK) == 0;
}

}  // namespace shardplan::cli
