// StepClock: the one steady clock a runner's measurements use, with t = 0 at the step's starting barrier.
#pragma once

#include <chrono>

namespace shardplan::runner {

// Note [One clock]: every measured time of a step (op start/end, memory samples) is read from this clock. Each rank
// restarts it right after a barrier at the step's start, so rank clocks are aligned to within the barrier's exit skew
// (microseconds on one host) without any clock exchange; that is the alignment the measured Timeline promises.
class StepClock {
 public:
  void restart() { zero_ = std::chrono::steady_clock::now(); }
  double now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - zero_).count();
  }

 private:
  std::chrono::steady_clock::time_point zero_ = std::chrono::steady_clock::now();
};

}  // namespace shardplan::runner
