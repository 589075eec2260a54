// MpiCollectiveCall: one MPI collective bound to its buffers, in the two forms the MPI driver can run it in.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>

#include "communicator.h"

namespace shardplan::comm {

// Each collective lives in its own file (mpi_all_gather.cpp, …) and only translates the backend-neutral arguments into
// its MPI call, the way nccl-tests gives each collective its own testColl plugged into one driver (src/common.h). The
// driver (mpi_communicator.cpp) decides how it runs:
// - `start` issues the MPI-3 non-blocking form and returns its request (MPI 3.1 §5.12);
// - `run` calls the blocking form, for the communication thread.
// Both throw InternalError (through MPI_CHECK) naming the collective's own file:line.
struct MpiCollectiveCall {
  const char* name = "";
  std::function<void(MPI_Comm, MPI_Request*)> start;
  std::function<void(MPI_Comm)> run;
};

MpiCollectiveCall mpi_all_gather(const float* send, std::size_t count_per_rank, float* recv, int rank);
MpiCollectiveCall mpi_reduce_scatter(const float* send, float* recv, std::size_t count, ReduceOp op);
MpiCollectiveCall mpi_all_reduce(float* buffer, std::size_t count, ReduceOp op);
MpiCollectiveCall mpi_broadcast(float* buffer, std::size_t count, int root);
MpiCollectiveCall mpi_send(const float* buffer, std::size_t count, int peer, int tag);
MpiCollectiveCall mpi_recv(float* buffer, std::size_t count, int peer, int tag);

// MPI 3.1's C bindings take int counts (the large-count _c variants arrived in MPI 4.0): larger counts throw.
int mpi_count(std::size_t count, const char* collective);
MPI_Op mpi_op(ReduceOp op);

}  // namespace shardplan::comm
