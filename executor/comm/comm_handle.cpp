// CommHandle: idempotent wait, non-blocking test, and the wait-on-destruction rule of Note [Dropping a handle].
#include "comm_handle.h"

#include <cstdio>

namespace shardplan::comm {

void CommHandle::finish_with(std::exception_ptr error) {
  pending_.reset();
  error_ = error;
}

void CommHandle::wait() {
  if (pending_) {
    try {
      pending_->wait();
      finish_with(nullptr);
    } catch (...) {
      finish_with(std::current_exception());
    }
  }
  if (error_) std::rethrow_exception(error_);
}

bool CommHandle::test() {
  if (pending_) {
    try {
      if (!pending_->test()) return false;
      finish_with(nullptr);
    } catch (...) {
      finish_with(std::current_exception());
    }
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

namespace {

// A collective whose wait is reported to a WaitObserver (Note [Step watchdog]); test() never blocks, so it is not.
class ObservedCollective final : public PendingCollective {
 public:
  ObservedCollective(std::unique_ptr<PendingCollective> inner, std::shared_ptr<WaitObserver> observer,
                     std::string label)
      : inner_(std::move(inner)), observer_(std::move(observer)), label_(std::move(label)) {}
  bool test() override { return inner_->test(); }
  void wait() override {
    observer_->waiting_on(label_);
    try {
      inner_->wait();
    } catch (...) {
      observer_->done_waiting();
      throw;
    }
    observer_->done_waiting();
  }

 private:
  std::unique_ptr<PendingCollective> inner_;
  std::shared_ptr<WaitObserver> observer_;
  std::string label_;
};

}  // namespace

CommHandle CommHandle::observed(std::shared_ptr<WaitObserver> observer, std::string label) && {
  if (!observer || !pending_) return std::move(*this);
  CommHandle wrapped;
  wrapped.pending_ = std::make_unique<ObservedCollective>(std::move(pending_), std::move(observer), std::move(label));
  wrapped.error_ = std::move(error_);
  return wrapped;
}

CommHandle& CommHandle::operator=(CommHandle&& other) {
  if (this != &other) {
    if (pending_) wait();
    pending_ = std::move(other.pending_);
    error_ = std::move(other.error_);
  }
  return *this;
}

CommHandle::~CommHandle() {
  if (!pending_) return;
  try {
    pending_->wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardplan: a dropped collective handle failed: %s\n", e.what());
    std::terminate();
  } catch (...) {
    std::fprintf(stderr, "shardplan: a dropped collective handle failed with an unknown error\n");
    std::terminate();
  }
}

}  // namespace shardplan::comm
