// pass_overlap_slowdown: a layer pass's slowdown beside a collective, its kernels' kinds weighted by their times
// (Note [Overlap slowdown by kernel kind] in overlap_slowdown.h).
#include "overlap_slowdown.h"

namespace shardplan {

double pass_overlap_slowdown(const PassTime& time, double fill_s, const HardwareProfile& profile) {
  const double memory_bound_s = time.memory_s + time.collective_s + fill_s;
  const double kernels_s = time.gemm_s + time.attention_s + memory_bound_s;
  if (!(kernels_s > 0)) return profile.overlap_memory_slowdown;
  return (time.gemm_s * profile.overlap_gemm_slowdown + time.attention_s * profile.overlap_attention_slowdown +
          memory_bound_s * profile.overlap_memory_slowdown) /
         kernels_s;
}

}  // namespace shardplan
