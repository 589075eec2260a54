// The GPU executor plugin's entry point: its function table, wrapping the device probe and run_on_gpu so that no
// exception crosses the C boundary (each becomes an exit status and the one-line message).
#include <cstring>
#include <exception>
#include <string>

#include "device_probe.h"
#include "errors.h"
#include "gpu_plugin_api.h"
#include "run_support.h"

namespace {

void copy_message(const std::string& text, char* buffer, std::size_t size) {
  if (buffer == nullptr || size == 0) return;
  const std::size_t length = std::min(text.size(), size - 1);
  std::memcpy(buffer, text.data(), length);
  buffer[length] = '\0';
}

int device_count(char* reason, std::size_t reason_size) {
  try {
    const shardplan::gpu::DeviceProbe probe = shardplan::gpu::probe_devices();
    if (probe.usable()) return probe.device_count;
    copy_message(probe.reason, reason, reason_size);
  } catch (const std::exception& error) {
    copy_message(error.what(), reason, reason_size);
  }
  return 0;
}

int run(const shardplan::cli::RunFlags* flags, char* message, std::size_t message_size) {
  try {
    return shardplan::cli::run_on_gpu(*flags);
  } catch (const shardplan::InputError& error) {
    copy_message(error.what(), message, message_size);
    return 2;
  } catch (const shardplan::Error& error) {
    copy_message(std::string(error.what()) + " [raised at " + error.raised_at() + "]", message, message_size);
    return 1;
  } catch (const std::exception& error) {
    copy_message(error.what(), message, message_size);
    return 1;
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const ShardplanGpuPlugin* shardplan_gpu_plugin(void) {
  static const ShardplanGpuPlugin table = {SHARDPLAN_GPU_PLUGIN_ABI, sizeof(shardplan::cli::RunFlags), device_count,
                                           run};
  return &table;
}
