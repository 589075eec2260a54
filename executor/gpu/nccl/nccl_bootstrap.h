// NCCL bootstrap over MPI: one GPU per process by its host-local rank, then an NCCL communicator for an MPI one.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <vector>

namespace shardplan::gpu {

// Note [Device per rank]: mpirun starts one process per GPU; the k-th process on a host (its host-local rank,
// host_local_rank.h) takes device k. With more processes than devices on a host the devices are shared round robin
// (k mod count), which CUDA allows but one NCCL communicator does not: ncclCommInitRank fails with "Duplicate GPU
// detected" when two of its ranks sit on one device. LocalDevice::shared() says so before anyone tries.
struct LocalDevice {
  int device = 0;        // the CUDA device this process now uses
  int local_rank = 0;    // this process among the ranks on its host
  int local_size = 1;    // ranks on this host
  int device_count = 0;  // CUDA devices this process sees
  bool shared() const { return local_size > device_count; }
};

// local_rank mod device_count. Throws InternalError when there is no device or local_rank is negative.
int device_for_local_rank(int local_rank, int device_count);

// Collective over `comm`: finds this process's host-local rank and makes device_for_local_rank(...) the current CUDA
// device (cudaSetDevice). Call it once at start-up, before allocating device memory or creating an NcclCommunicator
// (which uses the current device). Throws InternalError when CUDA sees no device.
LocalDevice bind_local_device(MPI_Comm comm = MPI_COMM_WORLD);

// Note [Blocking init]: NCCL communicators here are created blocking (ncclCommInitRank, ncclCommSplit with the parent's
// default config): the call returns once every rank has joined. A non-blocking communicator (ncclConfig_t::blocking =
// 0) could overlap its set-up with other work, but then every NCCL call on it, collectives included, may return
// ncclInProgress and has to be polled with ncclCommGetAsyncError before the next one; nothing here needs that.
//
// Collective over `comm`: rank 0 creates an ncclUniqueId (ncclGetUniqueId), MPI broadcasts it to every rank, and each
// rank joins with ncclCommInitRank(size, rank) on the current device, so NCCL rank r is MPI rank r of `comm`. The
// caller owns the result (ncclCommFinalize + ncclCommDestroy).
ncclComm_t init_nccl_comm(MPI_Comm comm);

// The members of `comm` as MPI_COMM_WORLD ranks, in the order of their rank in `comm` (MPI_Group_translate_ranks).
std::vector<int> world_ranks_of(MPI_Comm comm);

}  // namespace shardplan::gpu
