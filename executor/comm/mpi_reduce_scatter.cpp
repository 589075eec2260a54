// MPI reduce-scatter: MPI_Ireduce_scatter_block / MPI_Reduce_scatter_block.
#include "mpi_check.h"
#include "mpi_collective.h"

namespace shardplan::comm {

// MPI 3.1 §5.10.1 (MPI_Reduce_scatter_block) and §5.12.9 (MPI_Ireduce_scatter_block): every rank receives the same
// `count` elements — FSDP's equal shards, and NCCL's ncclReduceScatter semantics, so the NCCL backend can match it.
// `send` holds size·count elements; block r of the reduction goes to rank r. Odd and zero counts are valid as is.
MpiCollectiveCall mpi_reduce_scatter(const float* send, float* recv, std::size_t count, ReduceOp op) {
  const int n = mpi_count(count, "reduce_scatter");
  const MPI_Op mpi = mpi_op(op);
  MpiCollectiveCall call;
  call.name = "MPI_Ireduce_scatter_block";
  call.start = [=](MPI_Comm comm, MPI_Request* request) {
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, n, MPI_FLOAT, mpi, comm, request));
  };
  call.run = [=](MPI_Comm comm) { MPI_CHECK(MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, mpi, comm)); };
  return call;
}

}  // namespace shardplan::comm
