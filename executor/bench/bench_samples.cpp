// Benchmark rows → CalibrationSamples, the input of costmodel's calibrate().
#include "bench_samples.h"

#include <string>

namespace shardplan::bench {

CalibrationSamples bench_samples(const std::vector<CommRow>& comm_rows, const std::vector<KernelRow>& kernel_rows) {
  CalibrationSamples samples;
  for (const CommRow& row : comm_rows) {
    auto& tier = row.group.spans_nodes ? samples.inter_node : samples.intra_node;
    tier.push_back({row.collective, row.group.ranks, row.group.spans_nodes, row.bytes, row.time_s});
  }
  for (const KernelRow& row : kernel_rows) {
    switch (row.kind) {
      case KernelClass::layer: {
        ComputeSample sample{row.flops, row.time_s, row.name + ", " + std::to_string(row.size) + " tokens"};
        sample.gemm_count = row.gemm_count;
        sample.memory_bytes = row.bytes;
        samples.compute.push_back(std::move(sample));
        break;
      }
      case KernelClass::gemm: {
        ComputeSample sample{row.flops, row.time_s, row.name};
        sample.gemm_count = row.gemm_count;
        samples.gemm.push_back(std::move(sample));
        break;
      }
      case KernelClass::memory:
        samples.memory.push_back({row.bytes, row.time_s, row.name + ", " + std::to_string(row.size) + " elements"});
        break;
    }
  }
  return samples;
}

}  // namespace shardplan::bench
