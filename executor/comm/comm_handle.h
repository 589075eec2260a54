// CommHandle: the move-only, backend-neutral handle of one asynchronous collective (wait / test).
#pragma once

#include <exception>
#include <memory>
#include <string>

namespace shardplan::comm {

// Told what the rank blocks on around each blocking wait (Note [Step watchdog] in step_watchdog.h).
class WaitObserver {
 public:
  virtual ~WaitObserver() = default;
  virtual void waiting_on(const std::string& what) = 0;
  virtual void done_waiting() = 0;
};

// What a backend implements for one in-flight collective. test() may drive progress (for MPI non-blocking collectives
// it calls MPI_Test — Note [Progress] in mpi_communicator.h); wait() blocks until the collective is complete. Both throw
// InternalError when the collective failed. CommHandle calls neither again once one has reported completion.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

// The buffers passed to a collective belong to it until its handle reports completion (wait() returned or test()
// returned true) — the same contract as an MPI_Request (MPI 3.1 §3.7.2) or a CUDA event on an NCCL stream.
//
// Note [Dropping a handle]: a handle destroyed while its collective is in flight waits for it, because the buffers are
// still being read and written by the backend; a collective cannot be detached. If that wait fails, the destructor
// cannot report it, so it prints the error and calls std::terminate (the way std::thread does for a joinable thread);
// under mpirun, the dying rank takes the job down with it instead of leaving the other ranks hanging.
class CommHandle {
 public:
  CommHandle() = default;  // an already-complete handle (nothing to wait for)
  explicit CommHandle(std::unique_ptr<PendingCollective> pending) : pending_(std::move(pending)) {}
  CommHandle(CommHandle&& other) noexcept = default;
  // Waits for the collective this handle held before taking over `other`'s (Note [Dropping a handle]).
  CommHandle& operator=(CommHandle&& other);
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle();

  // Blocks until the collective completed. Idempotent: later calls return at once, or rethrow the same error if the
  // collective failed.
  void wait();
  // True once the collective completed; drives progress where the backend needs it. Never blocks.
  bool test();
  // True once completion was observed through wait() or test(); does not touch the backend.
  bool done() const noexcept { return pending_ == nullptr; }
  // The same collective, whose blocking wait tells `observer` (when not null) it waits on `label`.
  CommHandle observed(std::shared_ptr<WaitObserver> observer, std::string label) &&;

 private:
  void finish_with(std::exception_ptr error);

  std::unique_ptr<PendingCollective> pending_;  // null once complete
  std::exception_ptr error_;                    // the failure, kept so a second wait() reports it again
};

}  // namespace shardplan::comm
