// MPI_CHECK's slow path: formatting a failed MPI call into an InternalError.
#include "mpi_check.h"

#include <string>

#include "errors.h"

namespace shardplan::comm {

int mpi_world_rank() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void throw_mpi_error(int code, const char* call, std::source_location where) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  const int rank = mpi_world_rank();
  // Error::raised_at() formats the location the same way the CLI reports it; built here from a throwaway Error so the
  // message itself names file:line too (an MPI failure is read in a job log, not through the CLI).
  const std::string at = InternalError("", where, rank).raised_at();
  throw InternalError(std::string(call) + " failed on rank " + std::to_string(rank) + " at " + at + ": " +
                          std::string(text, static_cast<std::size_t>(length)) + " (MPI error " +
                          std::to_string(code) + ")",
                      where, rank);
}

}  // namespace shardplan::comm
