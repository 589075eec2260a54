// CommThread: one communication thread per communicator that runs its blocking MPI collectives in issue order.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "comm_handle.h"

namespace shardplan::comm {

// Why one thread per communicator and a FIFO: MPI requires the collectives of one communicator to be entered in the
// same order on every rank (MPI 3.1 §5.13), and with several threads calling collectives on one communicator that
// order would be up to the scheduler. One thread draining a queue keeps the issue order of the caller. Different
// communicators (shard and replica groups) have their own threads, so MPI must provide MPI_THREAD_MULTIPLE
// (MPI 3.1 §12.4.3). Idle, the thread sleeps on a condition variable; inside a blocking collective it is MPI's
// progress engine that spins.
class CommThread {
 public:
  CommThread();
  // Runs what is queued, then joins: collectives already issued complete before their communicator is freed.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `work`; the handle completes when it has run, and rethrows what it threw.
  CommHandle submit(std::function<void()> work);
  // Queues `work` behind everything issued before and waits for it (barrier, split).
  void run_in_order(std::function<void()> work);

 private:
  struct Task {
    std::function<void()> work;
    std::promise<void> done;
  };
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: started after the members it uses exist
};

}  // namespace shardplan::comm
