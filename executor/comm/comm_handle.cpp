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
