// Translations every MPI collective shares: element counts to MPI's int counts, ReduceOp to MPI_Op.
#include <climits>
#include <string>

#include "errors.h"
#include "mpi_check.h"
#include "mpi_collective.h"

namespace shardplan::comm {

int mpi_count(std::size_t count, const char* collective) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    const int rank = mpi_world_rank();
    throw InternalError(std::string("mpi ") + collective + " (rank " + std::to_string(rank) + "): count " +
                            std::to_string(count) + " exceeds MPI's int count limit; split the buffer",
                        std::source_location::current(), rank);
  }
  return static_cast<int>(count);
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

}  // namespace shardplan::comm
