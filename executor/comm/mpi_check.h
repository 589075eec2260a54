// MPI_CHECK: turns a failed MPI call into a shardplan::InternalError carrying the world rank and file:line.
#pragma once

#include <mpi.h>

#include <source_location>

namespace shardplan::comm {

// This process's rank in MPI_COMM_WORLD, or -1 when MPI is not (or no longer) initialised.
int mpi_world_rank();

// Throws InternalError: "<call> failed on rank R at file:line: <MPI error string>". Our communicators use
// MPI_ERRORS_RETURN (MPI 3.1 §8.3) so that failures reach this instead of MPI's default fatal handler.
[[noreturn]] void throw_mpi_error(int code, const char* call, std::source_location where);

inline void check_mpi(int code, const char* call, std::source_location where) {
  if (code != MPI_SUCCESS) throw_mpi_error(code, call, where);
}

}  // namespace shardplan::comm

// A macro (not a function) so that the failing call is named by its own source text; the location is the caller's.
#define MPI_CHECK(call) ::shardplan::comm::check_mpi((call), #call, std::source_location::current())
