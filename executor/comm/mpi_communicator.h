// MpiCommunicator: the MPI driver behind the Communicator interface (one file per collective plugs into it).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "communicator.h"
#include "mpi_collective.h"

namespace shardplan::comm {

class CommThread;

// Note [Progress]: how an issued collective advances while the caller computes.
// - nonblocking: MPI-3 non-blocking collectives (MPI_Iallgather, …; MPI 3.1 §5.12). The standard only promises progress
//   while the process is inside MPI (the progress rule, §3.7.4, applies to §5.12 too), and Open MPI 4.1 as packaged
//   here has no asynchronous progress thread (`ompi_info`: "OMPI progress: no"): libnbc advances a collective's
//   schedule only inside MPI_Test / MPI_Wait. So without polling, the transfer mostly happens in wait(); the caller
//   can poll CommHandle::test() between pieces of compute to push it along.
// - comm_thread: a communication thread per communicator runs the blocking collectives (mpi_comm_thread.h) and
//   makes progress on its own, needing MPI_THREAD_MULTIPLE; it costs a thread that spins inside MPI while waiting.
// benchmarks/comm_overlap_bench.cpp measures both under `mpirun -np 2`; the winner is the default (see the
// comment at MpiCommOptions).
enum class AsyncMechanism { nonblocking, comm_thread };
const char* to_string(AsyncMechanism mechanism);
// "nonblocking" or "comm_thread"; throws InputError otherwise.
AsyncMechanism parse_async_mechanism(const std::string& name);

struct MpiCommOptions {
  // nonblocking by measurement (benchmarks/comm_overlap_bench.cpp, tables in its header comment): with the ranks
  // filling the cores, non-blocking collectives polled between compute chunks gave the shortest step in 7 of 14 runs
  // (the comm thread in 4) and won every reduce-scatter size (0.89–0.96× the serial time vs 1.00–1.29×); the comm
  // thread spins inside MPI on the compute thread's core and only wins small, latency-bound all-gathers. On a node with
  // spare cores per rank it may win more; rerun the benchmark there (`mpirun --bind-to none`) before switching.
  AsyncMechanism mechanism = AsyncMechanism::nonblocking;
};

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `parent` (MPI_Comm_dup, collective over it), so our traffic never matches a host program's messages,
  // and switches it to MPI_ERRORS_RETURN so failures become InternalError through MPI_CHECK. Throws InternalError when
  // the comm thread is asked for and MPI does not provide MPI_THREAD_MULTIPLE.
  explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD, MpiCommOptions options = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const Group& group() const override { return group_; }
  const char* backend_name() const override { return "mpi"; }
  [[noreturn]] void abort(const std::string& message) override;

  const MpiCommOptions& options() const { return options_; }
  MPI_Comm native() const { return comm_; }

 protected:
  CommHandle start_all_gather(const float* send, std::size_t count_per_rank, float* recv) override;
  CommHandle start_reduce_scatter(const float* send, float* recv, std::size_t count, ReduceOp op) override;
  CommHandle start_all_reduce(float* buffer, std::size_t count, ReduceOp op) override;
  CommHandle start_broadcast(float* buffer, std::size_t count, int root) override;
  void run_barrier() override;
  std::unique_ptr<Communicator> make_split(int color, int key) override;
  CommHandle start_send(const float* buffer, std::size_t count, int peer, int tag) override;
  CommHandle start_recv(float* buffer, std::size_t count, int peer, int tag) override;

 private:
  struct Adopt {};
  // Takes ownership of a communicator MPI just created (by MPI_Comm_split).
  MpiCommunicator(Adopt, MPI_Comm owned, MpiCommOptions options);
  void init(MPI_Comm owned);
  // The one place a collective is started, by the configured mechanism.
  CommHandle launch(MpiCollectiveCall call);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  Group group_;
  MpiCommOptions options_;
  std::unique_ptr<CommThread> thread_;  // only for AsyncMechanism::comm_thread
};

}  // namespace shardplan::comm
