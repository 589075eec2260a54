// OpTimer: CUDA-event timing of every op of a step, read back once at the step's end into measured times.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace shardplan::gpu {

struct OpInterval {
  double start_s = 0;  // seconds after the step's start event
  double end_s = 0;
};

// Note [Event timing]: each op gets a start and an end event recorded on its own stream around its work, and the
// step a start event on the compute stream after the step's barrier. cudaEventElapsedTime between events of
// different streams is valid (both are device timestamps, ~0.5 µs resolution per the CUDA Runtime API reference), so
// every op lands on one device clock without host involvement; the host reads them after its single end-of-step
// synchronisation. Events are created once (with timing, which costs a little on record, so they are not reused as
// the dependency events of StreamAssignment, which are created with cudaEventDisableTiming).
class OpTimer {
 public:
  explicit OpTimer(std::size_t op_count);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  void start_step(cudaStream_t stream);
  void begin(std::size_t op, cudaStream_t stream);
  void end(std::size_t op, cudaStream_t stream);
  // After every timed op completed: intervals for every op, in op order (an op never begun reads as 0..0).
  std::vector<OpInterval> read() const;

 private:
  cudaEvent_t step_start_ = nullptr;
  std::vector<cudaEvent_t> starts_, ends_;
  std::vector<bool> recorded_;
};

}  // namespace shardplan::gpu
