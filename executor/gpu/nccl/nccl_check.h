// NCCL_CHECK: a failed NCCL call becomes a shardplan::InternalError carrying the rank and the caller's file:line.
#pragma once

#include <nccl.h>

#include <source_location>

namespace shardplan::gpu {

// The rank errors of this layer name: MPI_COMM_WORLD's rank while MPI is up, else the launcher's (launcher_rank()).
int nccl_error_rank();

// Throws InternalError: "<call> failed on rank R at file:line: <ncclGetErrorString> (NCCL error N): <last error>",
// the last part being ncclGetLastError, NCCL's own account of the failure (e.g. "Duplicate GPU detected"), which the
// result code alone does not give.
[[noreturn]] void throw_nccl_error(ncclResult_t code, const char* call, std::source_location where);

// ncclInProgress is a failure here: this layer only creates blocking communicators (Note [Blocking init] in
// nccl_bootstrap.h), for which NCCL never returns it.
inline void check_nccl(ncclResult_t code, const char* call, std::source_location where) {
  if (code != ncclSuccess) throw_nccl_error(code, call, where);
}

}  // namespace shardplan::gpu

// A macro (not a function) so that the failing call is named by its own source text; the location is the caller's.
#define NCCL_CHECK(call) ::shardplan::gpu::check_nccl((call), #call, std::source_location::current())
