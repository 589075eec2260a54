// MPI all-reduce: MPI_Iallreduce / MPI_Allreduce, in place.
#include "mpi_check.h"
#include "mpi_collective.h"

namespace shardplan::comm {

// MPI 3.1 §5.9.6 (MPI_Allreduce, MPI_IN_PLACE on every rank) and §5.12.8 (MPI_Iallreduce). HSDP's gradient all-reduce
// across replica groups reduces the already reduce-scattered shard in place, so in place is the only form offered.
MpiCollectiveCall mpi_all_reduce(float* buffer, std::size_t count, ReduceOp op) {
  const int n = mpi_count(count, "all_reduce");
  const MPI_Op mpi = mpi_op(op);
  MpiCollectiveCall call;
  call.name = "MPI_Iallreduce";
  call.start = [=](MPI_Comm comm, MPI_Request* request) {
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer, n, MPI_FLOAT, mpi, comm, request));
  };
  call.run = [=](MPI_Comm comm) { MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buffer, n, MPI_FLOAT, mpi, comm)); };
  return call;
}

}  // namespace shardplan::comm
