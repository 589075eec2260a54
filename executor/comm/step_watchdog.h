// StepWatchdog: a thread that brings the job down when this rank's step (or a wait inside it) runs past a timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "comm_handle.h"

namespace shardplan::comm {

// Note [Step watchdog]: a stopped (SIGSTOP), hung or silently dead peer leaves every other rank waiting inside a
// collective forever — at 100% CPU, since MPI_Wait and NCCL's kernels busy-poll — and mpirun notices nothing. So
// every rank runs a watchdog thread. The executor arms it around each phase that ends in collectives (a training
// step, a checkpoint save or resume); the communicators tell it what the rank is waiting on (WaitObserver, set on a
// Communicator and inherited by its splits). When an armed phase runs past the timeout, the thread hands one line
// naming this rank, the phase and the collective it has been waiting on to `expire`, which prints it and brings the
// whole job down: MPI_Abort on CPU ranks; on GPUs ncclCommAbort first, so no NCCL kernel of ours keeps spinning on a
// peer, then MPI_Abort. Each surviving rank's own watchdog fires at about the same time, so each says why it stops;
// the stopped rank cannot say anything. The timeout is per phase: by default a factor of the plan's predicted step
// time (cli/cmd_run.cpp), never a fixed number of seconds that a slow machine would trip.

class StepWatchdog final : public WaitObserver {
 public:
  // Called once, from the watchdog thread, with the one-line message ("rank 1: step 3 still running after ...");
  // prints it and brings the job down, so it does not return.
  using Expire = std::function<void(const std::string& message)>;

  // `timeout_s` > 0; `world_rank` names this rank in the message.
  StepWatchdog(double timeout_s, int world_rank, Expire expire);
  ~StepWatchdog() override;
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  // Starts the clock for `phase` ("step 3", "checkpoint save"); disarm() stops it.
  void arm(const std::string& phase);
  void disarm();

  void waiting_on(const std::string& what) override;
  void done_waiting() override;

  double timeout_s() const { return timeout_s_; }

 private:
  using Clock = std::chrono::steady_clock;
  void loop();
  std::string message_locked(Clock::time_point now) const;

  const double timeout_s_;
  const int world_rank_;
  const Expire expire_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool armed_ = false;
  std::string phase_;
  Clock::time_point armed_at_{};
  std::string waiting_on_;  // empty when not inside a wait
  Clock::time_point waiting_since_{};
  std::thread thread_;  // last: started after the members it uses exist
};

// Arms `watchdog` (when there is one) for the lifetime of this object.
class WatchedPhase {
 public:
  WatchedPhase(StepWatchdog* watchdog, const std::string& phase) : watchdog_(watchdog) {
    if (watchdog_) watchdog_->arm(phase);
  }
  ~WatchedPhase() {
    if (watchdog_) watchdog_->disarm();
  }
  WatchedPhase(const WatchedPhase&) = delete;
  WatchedPhase& operator=(const WatchedPhase&) = delete;

 private:
  StepWatchdog* watchdog_;
};

}  // namespace shardplan::comm
