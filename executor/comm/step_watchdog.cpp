// StepWatchdog (Note [Step watchdog]): the timer thread and what it says when a phase overruns.
#include "step_watchdog.h"

#include <algorithm>
#include <cstdio>

namespace shardplan::comm {

namespace {
std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}
}  // namespace

StepWatchdog::StepWatchdog(double timeout_s, int world_rank, Expire expire)
    : timeout_s_(timeout_s), world_rank_(world_rank), expire_(std::move(expire)), thread_([this] { loop(); }) {}

StepWatchdog::~StepWatchdog() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StepWatchdog::arm(const std::string& phase) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    armed_ = true;
    phase_ = phase;
    armed_at_ = Clock::now();
  }
  wake_.notify_all();
}

void StepWatchdog::disarm() {
  const std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
}

void StepWatchdog::waiting_on(const std::string& what) {
  const std::lock_guard<std::mutex> lock(mutex_);
  waiting_on_ = what;
  waiting_since_ = Clock::now();
}

void StepWatchdog::done_waiting() {
  const std::lock_guard<std::mutex> lock(mutex_);
  waiting_on_.clear();
}

std::string StepWatchdog::message_locked(Clock::time_point now) const {
  const auto elapsed = [&](Clock::time_point since) { return std::chrono::duration<double>(now - since).count(); };
  std::string message = "rank " + std::to_string(world_rank_) + ": " + phase_ + " still running after " +
                        seconds_text(elapsed(armed_at_)) + " (watchdog timeout " + seconds_text(timeout_s_) + ", " +
                        "--watchdog-timeout)";
  message += waiting_on_.empty() ? ", not inside a collective wait"
                                 : ", waiting " + seconds_text(elapsed(waiting_since_)) + " on " + waiting_on_;
  return message + ": a peer rank is stopped, hung or dead; aborting the job";
}

void StepWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  // The thread ticks while a phase is armed. A tick this much later than the previous one means the whole process
  // did not run in between (SIGSTOP, a suspended machine) — a thread woken from a condition variable runs within
  // milliseconds even on a loaded machine — and that time is not counted: this rank's own silence is not a peer's.
  // So a stopped rank that mpirun's tear-down continues (SIGCONT, then SIGTERM) dies without claiming a peer failed.
  constexpr auto kTick = std::chrono::milliseconds(100);
  constexpr auto kFrozen = std::chrono::seconds(1);
  Clock::time_point last_tick = Clock::now();
  while (!stopping_) {
    if (!armed_) {
      wake_.wait(lock, [this] { return stopping_ || armed_; });
      last_tick = Clock::now();
      continue;
    }
    const Clock::time_point armed_at = armed_at_;
    wake_.wait_until(lock, std::min(armed_at + timeout, last_tick + kTick),
                     [&] { return stopping_ || !armed_ || armed_at_ != armed_at; });
    const Clock::time_point now = Clock::now();
    if (now - last_tick > kFrozen) {
      armed_at_ += now - last_tick;  // the frozen time, excluded from the phase (and from the wait it reports)
      waiting_since_ += now - last_tick;
    }
    last_tick = now;
    if (stopping_ || !armed_ || now < armed_at_ + timeout) continue;
    const std::string message = message_locked(now);
    lock.unlock();
    expire_(message);  // prints it and brings the job down; should it return, fire once only
    lock.lock();
    armed_ = false;
  }
}

}  // namespace shardplan::comm
