// MpiSession: MPI_Init_thread with the requested thread level, MPI_Finalize on destruction.
#include "mpi_session.h"

#include <mpi.h>

#include "errors.h"
#include "mpi_check.h"

namespace shardplan::comm {

const char* to_string(ThreadLevel level) {
  switch (level) {
    case ThreadLevel::single: return "MPI_THREAD_SINGLE";
    case ThreadLevel::funneled: return "MPI_THREAD_FUNNELED";
    case ThreadLevel::serialized: return "MPI_THREAD_SERIALIZED";
    case ThreadLevel::multiple: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

namespace {

int to_mpi(ThreadLevel level) {
  switch (level) {
    case ThreadLevel::single: return MPI_THREAD_SINGLE;
    case ThreadLevel::funneled: return MPI_THREAD_FUNNELED;
    case ThreadLevel::serialized: return MPI_THREAD_SERIALIZED;
    case ThreadLevel::multiple: return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

ThreadLevel from_mpi(int level) {
  if (level >= MPI_THREAD_MULTIPLE) return ThreadLevel::multiple;
  if (level >= MPI_THREAD_SERIALIZED) return ThreadLevel::serialized;
  if (level >= MPI_THREAD_FUNNELED) return ThreadLevel::funneled;
  return ThreadLevel::single;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv, ThreadLevel requested) {
  int finalized = 0;
  MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized) throw InternalError("MpiSession: MPI was already finalised; create one MpiSession per process");
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    MPI_CHECK(MPI_Init_thread(argc, argv, to_mpi(requested), &provided));
    owns_ = true;
  }
  provided_ = from_mpi(provided);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
}

MpiSession::~MpiSession() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();  // a destructor cannot report failure; the return code is dropped on purpose
}

}  // namespace shardplan::comm
