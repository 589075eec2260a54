// CommThread: the queue, the worker loop, and the handle of a collective run by the communication thread.
#include "mpi_comm_thread.h"

#include <chrono>

namespace shardplan::comm {

namespace {

class ThreadedCollective final : public PendingCollective {
 public:
  explicit ThreadedCollective(std::future<void> done) : done_(std::move(done)) {}
  bool test() override {
    if (done_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    done_.get();  // rethrows the collective's error
    return true;
  }
  void wait() override { done_.get(); }

 private:
  std::future<void> done_;
};

}  // namespace

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

CommHandle CommThread::submit(std::function<void()> work) {
  Task task{std::move(work), std::promise<void>()};
  std::future<void> done = task.done.get_future();
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return CommHandle(std::make_unique<ThreadedCollective>(std::move(done)));
}

void CommThread::run_in_order(std::function<void()> work) { submit(std::move(work)).wait(); }

void CommThread::loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything issued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task.work();
      task.done.set_value();
    } catch (...) {
      task.done.set_exception(std::current_exception());
    }
  }
}

}  // namespace shardplan::comm
