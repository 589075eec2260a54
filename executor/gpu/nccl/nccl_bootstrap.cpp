// NCCL bootstrap over MPI: device selection by host-local rank, ncclUniqueId broadcast, ncclCommInitRank.
#include "nccl_bootstrap.h"

#include <cuda_runtime.h>

#include <numeric>
#include <string>

#include "cuda_check.h"
#include "errors.h"
#include "host_local_rank.h"
#include "mpi_check.h"
#include "nccl_check.h"

namespace shardplan::gpu {

int device_for_local_rank(int local_rank, int device_count) {
  if (device_count <= 0) {
    throw InternalError("device_for_local_rank: no CUDA device to choose from (device count " +
                            std::to_string(device_count) + ")",
                        std::source_location::current(), nccl_error_rank());
  }
  if (local_rank < 0) {
    throw InternalError("device_for_local_rank: negative local rank " + std::to_string(local_rank),
                        std::source_location::current(), nccl_error_rank());
  }
  return local_rank % device_count;
}

LocalDevice bind_local_device(MPI_Comm comm) {
  const comm::HostLocalRank local = comm::host_local_rank(comm);
  LocalDevice bound;
  bound.local_rank = local.rank;
  bound.local_size = local.size;
  CUDA_CHECK(cudaGetDeviceCount(&bound.device_count));
  bound.device = device_for_local_rank(local.rank, bound.device_count);
  CUDA_CHECK(cudaSetDevice(bound.device));
  return bound;
}

ncclComm_t init_nccl_comm(MPI_Comm comm) {
  int rank = 0;
  int size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  // The id travels with rank 0's result, so that when rank 0 cannot create one every rank throws instead of the
  // others joining a communicator with a zeroed id and waiting in ncclCommInitRank.
  struct IdMessage {
    ncclUniqueId id;
    ncclResult_t created;
  };
  IdMessage message{};
  message.created = ncclSuccess;
  if (rank == 0) message.created = ncclGetUniqueId(&message.id);
  comm::broadcast_object(comm, message, 0);
  if (message.created != ncclSuccess) {
    if (rank == 0) throw_nccl_error(message.created, "ncclGetUniqueId(&message.id)", std::source_location::current());
    throw InternalError("init_nccl_comm: rank 0 of the communicator could not create the NCCL unique id: " +
                            std::string(ncclGetErrorString(message.created)),
                        std::source_location::current(), nccl_error_rank());
  }
  const ncclUniqueId& id = message.id;
  ncclComm_t nccl = nullptr;
  NCCL_CHECK(ncclCommInitRank(&nccl, size, id, rank));
  return nccl;
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Group mine = MPI_GROUP_NULL;
  MPI_Group world = MPI_GROUP_NULL;
  MPI_CHECK(MPI_Comm_group(comm, &mine));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> local(static_cast<std::size_t>(size));
  std::iota(local.begin(), local.end(), 0);
  std::vector<int> world_ranks(local.size(), -1);
  MPI_CHECK(MPI_Group_translate_ranks(mine, size, local.data(), world, world_ranks.data()));
  MPI_CHECK(MPI_Group_free(&mine));
  MPI_CHECK(MPI_Group_free(&world));
  return world_ranks;
}

}  // namespace shardplan::gpu
