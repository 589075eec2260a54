// MpiSession: RAII for MPI_Init_thread / MPI_Finalize, once per process.
#pragma once

namespace shardplan::comm {

// MPI 3.1 §12.4.3 thread levels, in increasing order.
enum class ThreadLevel { single, funneled, serialized, multiple };
const char* to_string(ThreadLevel level);

// Create one at the top of main(), before any communicator, and let it outlive them all.
// - Requests MPI_THREAD_MULTIPLE by default: the communication-thread mechanism runs collectives on one thread per
//   communicator while the main thread issues others (Note [Progress] in mpi_communicator.h).
// - If MPI is already initialised (by a host program), the session adopts it and leaves MPI_Finalize to its owner.
// - MPI cannot be initialised again after MPI_Finalize (MPI 3.1 §8.7), so a session created after one ended throws
//   InternalError instead of letting MPI abort the process.
// The provided level may be lower than requested; check provided() (MpiCommunicator does for the comm thread).
class MpiSession {
 public:
  explicit MpiSession(int* argc = nullptr, char*** argv = nullptr, ThreadLevel requested = ThreadLevel::multiple);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  ThreadLevel provided() const { return provided_; }
  bool owns_mpi() const { return owns_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  ThreadLevel provided_ = ThreadLevel::single;
  bool owns_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
};

}  // namespace shardplan::comm
