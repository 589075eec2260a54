// NCCL_CHECK's slow path: formatting a failed NCCL call into an InternalError.
#include "nccl_check.h"

#include <string>

#include "cuda_check.h"
#include "errors.h"
#include "mpi_check.h"

namespace shardplan::gpu {

int nccl_error_rank() {
  const int rank = comm::mpi_world_rank();
  return rank >= 0 ? rank : launcher_rank();
}

void throw_nccl_error(ncclResult_t code, const char* call, std::source_location where) {
  const int rank = nccl_error_rank();
  // Error::raised_at() formats the location as the CLI reports it (repository-relative file:line).
  const std::string at = InternalError("", where, rank).raised_at();
  std::string message = std::string(call) + " failed on rank " + std::to_string(rank) + " at " + at + ": " +
                        ncclGetErrorString(code) + " (NCCL error " + std::to_string(static_cast<int>(code)) + ")";
  // NCCL keeps one last-error text per process; its comm argument "is currently unused and can be set to NULL"
  // (src/init.cc). It may describe an earlier failure if this one set none, so it follows the code, not replaces it.
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && last[0] != '\0') {
    message += std::string(": ") + last;
  }
  throw InternalError(message, where, rank);
}

}  // namespace shardplan::gpu
