// Host-local rank from exchanged host-name hashes, and the byte-blob broadcast that carries an NCCL id.
#include "host_local_rank.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <string>

#include "errors.h"
#include "mpi_check.h"

namespace shardplan::comm {

std::uint64_t host_name_hash(std::string_view host_name) {
  std::uint64_t hash = 14695981039346656037ULL;  // FNV-1a 64-bit offset basis
  for (const char c : host_name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;  // FNV-1a 64-bit prime
  }
  return hash;
}

HostLocalRank host_local_rank(const std::vector<std::uint64_t>& host_hashes, int rank) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= host_hashes.size()) {
    throw InternalError("host_local_rank: rank " + std::to_string(rank) + " is not one of the " +
                            std::to_string(host_hashes.size()) + " ranks whose host hashes were given",
                        std::source_location::current(), mpi_world_rank());
  }
  const std::uint64_t mine = host_hashes[static_cast<std::size_t>(rank)];
  HostLocalRank local;
  local.rank = static_cast<int>(std::count(host_hashes.begin(), host_hashes.begin() + rank, mine));
  local.size = static_cast<int>(std::count(host_hashes.begin(), host_hashes.end(), mine));
  return local;
}

std::string this_host_name() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_CHECK(MPI_Get_processor_name(name, &length));
    return std::string(name, static_cast<std::size_t>(std::max(length, 0)));
  }
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) {
    throw InternalError("this_host_name: gethostname failed", std::source_location::current(), mpi_world_rank());
  }
  return name;
}

HostLocalRank host_local_rank(MPI_Comm comm) {
  int rank = 0;
  int size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  // uint64_t travels as MPI_UINT64_T (MPI 3.1 §3.2.2), so the hashes compare exactly on every rank.
  std::uint64_t mine = host_name_hash(this_host_name());
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(size));
  MPI_CHECK(MPI_Allgather(&mine, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, comm));
  return host_local_rank(hashes, rank);
}

void broadcast_bytes(MPI_Comm comm, void* data, std::size_t bytes, int root) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  if (root < 0 || root >= size) {
    throw InternalError("broadcast_bytes: root " + std::to_string(root) + " is not a rank of a communicator of " +
                            std::to_string(size),
                        std::source_location::current(), mpi_world_rank());
  }
  if (bytes > 0 && data == nullptr) {
    throw InternalError("broadcast_bytes: null buffer for " + std::to_string(bytes) + " bytes",
                        std::source_location::current(), mpi_world_rank());
  }
  // MPI counts are int; every rank cuts the same pieces because every rank passes the same size.
  auto* cursor = static_cast<unsigned char*>(data);
  std::size_t left = bytes;
  while (left > 0) {
    const std::size_t piece = std::min<std::size_t>(left, INT_MAX);
    MPI_CHECK(MPI_Bcast(cursor, static_cast<int>(piece), MPI_BYTE, root, comm));
    cursor += piece;
    left -= piece;
  }
}

}  // namespace shardplan::comm
