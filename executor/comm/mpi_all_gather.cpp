// MPI all-gather: MPI_Iallgather / MPI_Allgather, with FSDP's in-place form.
#include <cstdint>

#include "mpi_check.h"
#include "mpi_collective.h"

namespace shardplan::comm {

// MPI 3.1 §5.7 (MPI_Allgather) and §5.12.5 (MPI_Iallgather). When `send` already sits in this rank's slot of `recv`
// — FSDP keeps the local shard inside the unsharded flat parameter — MPI_IN_PLACE tells MPI not to copy it, which is
// also the only legal way to alias the two buffers (§5.2.1). recvcount is per rank, so an odd count_per_rank needs no
// padding here; a zero count is a valid (empty) collective that every rank still has to enter.
MpiCollectiveCall mpi_all_gather(const float* send, std::size_t count_per_rank, float* recv, int rank) {
  const int count = mpi_count(count_per_rank, "all_gather");
  const bool in_place =
      count_per_rank > 0 && send == recv + static_cast<std::size_t>(rank) * count_per_rank;
  const void* send_arg = in_place ? MPI_IN_PLACE : static_cast<const void*>(send);
  MpiCollectiveCall call;
  call.name = "MPI_Iallgather";
  call.start = [=](MPI_Comm comm, MPI_Request* request) {
    MPI_CHECK(MPI_Iallgather(send_arg, count, MPI_FLOAT, recv, count, MPI_FLOAT, comm, request));
  };
  call.run = [=](MPI_Comm comm) {
    MPI_CHECK(MPI_Allgather(send_arg, count, MPI_FLOAT, recv, count, MPI_FLOAT, comm));
  };
  return call;
}

}  // namespace shardplan::comm
