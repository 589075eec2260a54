// MPI point-to-point: MPI_Isend / MPI_Irecv (and the blocking forms), for pipeline parallelism's stage boundaries.
#include "mpi_check.h"
#include "mpi_collective.h"

namespace shardplan::comm {

// MPI 3.1 §3.7.2 (MPI_Isend, MPI_Irecv). Standard-mode sends: small messages go eagerly, large ones wait for the
// matching receive (rendezvous), which is why the driver only ever starts the non-blocking form and the caller keeps
// testing the request (Note [Progress] in mpi_communicator.h).
MpiCollectiveCall mpi_send(const float* buffer, std::size_t count, int peer, int tag) {
  const int n = mpi_count(count, "send");
  MpiCollectiveCall call;
  call.name = "MPI_Isend";
  call.start = [=](MPI_Comm comm, MPI_Request* request) {
    MPI_CHECK(MPI_Isend(buffer, n, MPI_FLOAT, peer, tag, comm, request));
  };
  call.run = [=](MPI_Comm comm) { MPI_CHECK(MPI_Send(buffer, n, MPI_FLOAT, peer, tag, comm)); };
  return call;
}

MpiCollectiveCall mpi_recv(float* buffer, std::size_t count, int peer, int tag) {
  const int n = mpi_count(count, "recv");
  MpiCollectiveCall call;
  call.name = "MPI_Irecv";
  call.start = [=](MPI_Comm comm, MPI_Request* request) {
    MPI_CHECK(MPI_Irecv(buffer, n, MPI_FLOAT, peer, tag, comm, request));
  };
  call.run = [=](MPI_Comm comm) { MPI_CHECK(MPI_Recv(buffer, n, MPI_FLOAT, peer, tag, comm, MPI_STATUS_IGNORE)); };
  return call;
}

}  // namespace shardplan::comm
