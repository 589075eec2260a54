// MPI broadcast: MPI_Ibcast / MPI_Bcast.
#include "mpi_check.h"
#include "mpi_collective.h"

namespace shardplan::comm {

// MPI 3.1 §5.4 (MPI_Bcast) and §5.12.2 (MPI_Ibcast). Used to start every rank from rank 0's initial parameters and to
// share a plan or a checkpoint's metadata; `count` must match on all ranks, as the standard requires.
MpiCollectiveCall mpi_broadcast(float* buffer, std::size_t count, int root) {
  const int n = mpi_count(count, "broadcast");
  MpiCollectiveCall call;
  call.name = "MPI_Ibcast";
  call.start = [=](MPI_Comm comm, MPI_Request* request) {
    MPI_CHECK(MPI_Ibcast(buffer, n, MPI_FLOAT, root, comm, request));
  };
  call.run = [=](MPI_Comm comm) { MPI_CHECK(MPI_Bcast(buffer, n, MPI_FLOAT, root, comm)); };
  return call;
}

}  // namespace shardplan::comm
