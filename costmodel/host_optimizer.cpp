// The CPU optimizer step's time (Note [CPU optimizer step] in host_optimizer.h).
#include "host_optimizer.h"

#include <algorithm>

#include "errors.h"

namespace shardplan {

double host_optimizer_step_time_s(double step_bytes, const HardwareProfile& profile) {
  if (step_bytes <= 0) return 0;
  SHARDPLAN_CHECK(profile.host_memory_bytes_per_s > 0, "profile has no host memory bandwidth");
  const double ranks_sharing = std::max(1, profile.gpus_per_node);
  return step_bytes * ranks_sharing / (kCpuAdamBandwidthFraction * profile.host_memory_bytes_per_s);
}

}  // namespace shardplan
