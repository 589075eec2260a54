// OpTimer: timing events per op and their readout relative to the step's start.
#include "op_timer.h"

#include "cuda_check.h"

namespace shardplan::gpu {

OpTimer::OpTimer(std::size_t op_count) : starts_(op_count), ends_(op_count), recorded_(op_count, false) {
  CUDA_CHECK(cudaEventCreate(&step_start_));
  for (std::size_t op = 0; op < op_count; ++op) {
    CUDA_CHECK(cudaEventCreate(&starts_[op]));
    CUDA_CHECK(cudaEventCreate(&ends_[op]));
  }
}

OpTimer::~OpTimer() {
  // Destruction cannot report errors; a failed destroy only leaks an event handle.
  cudaEventDestroy(step_start_);
  for (std::size_t op = 0; op < starts_.size(); ++op) {
    cudaEventDestroy(starts_[op]);
    cudaEventDestroy(ends_[op]);
  }
}

void OpTimer::start_step(cudaStream_t stream) {
  recorded_.assign(recorded_.size(), false);
  CUDA_CHECK(cudaEventRecord(step_start_, stream));
}

void OpTimer::begin(std::size_t op, cudaStream_t stream) {
  CUDA_CHECK(cudaEventRecord(starts_.at(op), stream));
  recorded_[op] = true;
}

void OpTimer::end(std::size_t op, cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(ends_.at(op), stream)); }

std::vector<OpInterval> OpTimer::read() const {
  std::vector<OpInterval> intervals(starts_.size());
  for (std::size_t op = 0; op < starts_.size(); ++op) {
    if (!recorded_[op]) continue;
    float start_ms = 0, end_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&start_ms, step_start_, starts_[op]));
    CUDA_CHECK(cudaEventElapsedTime(&end_ms, step_start_, ends_[op]));
    intervals[op] = {start_ms * 1e-3, end_ms * 1e-3};
  }
  return intervals;
}

}  // namespace shardplan::gpu
