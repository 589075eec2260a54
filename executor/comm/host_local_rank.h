// Host-local rank: which process of this host we are (to pick a GPU), and broadcasting an opaque blob (an NCCL id).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace shardplan::comm {

// This process among the ranks of a communicator that run on the same host.
struct HostLocalRank {
  int rank = 0;  // how many lower ranks of the communicator share our host
  int size = 1;  // how many ranks of the communicator share our host, us included
};

// 64-bit FNV-1a of a host name: the same on every process, compiler and run (std::hash promises none of that).
std::uint64_t host_name_hash(std::string_view host_name);

// The pure part, testable without MPI: `host_hashes[r]` is rank r's host_name_hash. Our local rank is the number of
// lower ranks with our hash, the local size the number of ranks with it. Throws InternalError when `rank` is not an
// index of `host_hashes`. Two distinct host names with the same 64-bit hash would be taken for one host; at 2^-64 per
// pair that is the same bet NCCL's own examples make (getHostHash in the NCCL user guide's MPI example).
HostLocalRank host_local_rank(const std::vector<std::uint64_t>& host_hashes, int rank);

// This host's name as MPI reports it (MPI_Get_processor_name), falling back to gethostname when MPI is not initialised.
std::string this_host_name();

// Collective over `comm` (MPI_Allgather of every rank's host hash): this process's rank and size on its host.
HostLocalRank host_local_rank(MPI_Comm comm = MPI_COMM_WORLD);

// Collective over `comm`: every rank's `bytes` bytes at `data` become root's (MPI_Bcast of MPI_BYTE, in pieces when
// the blob is larger than an int can count). For opaque blobs whose layout is the same on every rank of one build.
void broadcast_bytes(MPI_Comm comm, void* data, std::size_t bytes, int root);

// broadcast_bytes for one trivially copyable object, e.g. an ncclUniqueId created on rank 0.
template <typename T>
void broadcast_object(MPI_Comm comm, T& object, int root) {
  static_assert(std::is_trivially_copyable_v<T>, "only a trivially copyable object can travel as bytes");
  broadcast_bytes(comm, &object, sizeof(T), root);
}

}  // namespace shardplan::comm
