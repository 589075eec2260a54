// NcclCommunicator: the Communicator over NCCL on device buffers, with its all-gather and reduce-scatter streams.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "communicator.h"

namespace shardplan::gpu {

// Element type of the typed collectives (mixed precision: bf16 parameters all-gathered, gradients reduce-scattered).
enum class DeviceDataType { f32, bf16 };
const char* to_string(DeviceDataType type);
std::size_t size_of(DeviceDataType type);  // bytes per element

// Note [Collective streams]: every collective of a communicator runs on one of two streams it owns, created
// cudaStreamNonBlocking so that neither synchronises with the legacy default stream:
// - the all-gather stream (all-gathers, and broadcasts, which also only move parameters out), and
// - the reduce stream (reduce-scatters and all-reduces: gradients coming back).
// FSDP issues the next unit's all-gather while the current unit's reduce-scatter is still running (backward prefetch);
// PyTorch FSDP2 keeps separate all-gather and reduce-scatter streams for exactly this (FSDPCommContext.lazy_init in
// torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py), so that each wait names only the collective it concerns
// (the compute stream waits for its parameters, a reduce-scatter for its gradients) and work a runner puts around a
// collective on its stream (copy-in, gradient scaling) never serialises with the other direction. Like FSDP2
// (priority -1) both streams get a high priority, so collective kernels find SMs while compute kernels are queued.
// An HSDP all-reduce runs on the replica-group communicator, i.e. on that communicator's own reduce stream,
// concurrently with the shard group's collectives, as FSDP2's separate all-reduce stream does.
//
// Streams order work; they do not let two collectives of one communicator run at once: NCCL launches a communicator's
// kernels in issue order whatever their streams (ncclLaunchPrepare in NCCL's src/enqueue.cc chains each kernel through
// the communicator's internal device stream), so a collective also waits for everything issued before it on the same
// communicator. FSDP's order (the prefetching all-gather issued before the reduce-scatter of the unit being
// differentiated) keeps that from costing overlap; an all-gather and a reduce-scatter that truly run at the same time
// would need two NCCL communicators over the same ranks (a split with one colour for every rank).
//
// Nothing orders a collective after the work that produced its input but the caller: before issuing, make
// stream(kind) wait for that work (cudaEventRecord on the producing stream, cudaStreamWaitEvent(stream(kind), event)),
// and make the consuming stream wait for the collective the same way (an event recorded on stream(kind) right after
// the call). No host synchronisation is needed inside a step; CommHandle is for the host.
//
// Note [Waiting on the GPU]: a collective's handle holds a CUDA event recorded on its stream right after the NCCL call.
// test() is cudaEventQuery plus ncclCommGetAsyncError; wait() polls test() (yielding the thread between polls) rather
// than calling cudaEventSynchronize, because an NCCL failure (a peer's network error, a communicator aborted
// elsewhere) leaves the kernel, and so the event, pending forever: polling the communicator's asynchronous error turns
// that into an InternalError instead of a hang. A handle may outlive its communicator: the destructor finalises the
// communicator, which completes every issued collective, after which a handle only consults its event.
class NcclCommunicator final : public comm::Communicator {
 public:
  // Collective over `parent`: duplicates it (MPI_Comm_dup; the duplicate serves barrier, split and the world ranks of
  // the group) and creates an NCCL communicator over the same ranks on the current CUDA device (init_nccl_comm in
  // nccl_bootstrap.h), with the two streams of Note [Collective streams]. Call bind_local_device() first.
  explicit NcclCommunicator(MPI_Comm parent = MPI_COMM_WORLD);
  // Finalises the NCCL communicator (waiting for every issued collective) and destroys it, or aborts it when it
  // reported an asynchronous error; frees the streams and the MPI duplicate. Never throws; failures are printed.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const comm::Group& group() const override { return group_; }
  const char* backend_name() const override { return "nccl"; }
  // Prints the message with this rank, aborts the NCCL communicator (ncclCommAbort, so no kernel of ours keeps
  // waiting for a peer) and brings the job down with MPI_Abort on MPI_COMM_WORLD.
  [[noreturn]] void abort(const std::string& message) override;

  // The float collectives of comm::Communicator, on device buffers (ncclFloat32).
  using comm::Communicator::all_gather;
  using comm::Communicator::reduce_scatter;
  // Typed collectives for mixed precision: the same contracts and argument checks as the float ones, with counts in
  // elements of `type` and byte counters of count · size_of(type). f32 is exactly the float overload.
  comm::CommHandle all_gather(const void* send, std::size_t count_per_rank, void* recv, DeviceDataType type);
  comm::CommHandle reduce_scatter(const void* send, void* recv, std::size_t count, DeviceDataType type,
                                  comm::ReduceOp op = comm::ReduceOp::sum);

  // The stream a kind of collective runs on (Note [Collective streams]), for cudaStreamWaitEvent in either direction.
  // Throws InternalError for Collective::barrier, which runs on no stream.
  cudaStream_t stream(comm::Collective kind) const;
  int device() const { return device_; }
  ncclComm_t native() const { return nccl_; }
  MPI_Comm mpi_comm() const { return mpi_; }

  // State a collective's handle shares with its communicator (Note [Waiting on the GPU]); defined in the .cpp.
  struct Shared;

 protected:
  comm::CommHandle start_all_gather(const float* send, std::size_t count_per_rank, float* recv) override;
  comm::CommHandle start_reduce_scatter(const float* send, float* recv, std::size_t count, comm::ReduceOp op) override;
  comm::CommHandle start_all_reduce(float* buffer, std::size_t count, comm::ReduceOp op) override;
  comm::CommHandle start_broadcast(float* buffer, std::size_t count, int root) override;
  // MPI_Barrier on the MPI duplicate: the interface's barrier is "every rank's host program reached this point", which
  // MPI gives without device memory or a stream synchronisation. It does not wait for issued collectives (wait on
  // their handles for that), exactly as MpiCommunicator's barrier does not complete outstanding requests.
  void run_barrier() override;
  // MPI_Comm_split for the MPI side, then ncclCommSplit (NCCL >= 2.18) with the same colour and key, which orders the
  // new ranks by (key, parent rank) as MPI does; the two are checked to agree.
  std::unique_ptr<comm::Communicator> make_split(int color, int key) override;

 private:
  struct Adopt {};
  // Takes ownership of an MPI communicator and an NCCL communicator over the same ranks (from make_split).
  NcclCommunicator(Adopt, MPI_Comm mpi, ncclComm_t nccl, int device);
  // Ranks, group, streams; on failure releases what exists and rethrows.
  void init();
  void release() noexcept;
  comm::CommHandle issue_all_gather(const void* send, std::size_t count_per_rank, void* recv, ncclDataType_t type);
  comm::CommHandle issue_reduce_scatter(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                                        comm::ReduceOp op);
  // Records the completion event of the collective just issued on `stream` and wraps it in a handle.
  comm::CommHandle completion_on(cudaStream_t stream);
  // Counts a typed collective as Communicator counts its float ones (see the definition for how).

  MPI_Comm mpi_ = MPI_COMM_NULL;
  ncclComm_t nccl_ = nullptr;
  std::shared_ptr<Shared> shared_;  // handles keep it, so they can tell the communicator is gone
  int device_ = 0;
  int rank_ = 0;
  int size_ = 1;
  comm::Group group_;
  cudaStream_t all_gather_stream_ = nullptr;
  cudaStream_t reduce_stream_ = nullptr;
};

}  // namespace shardplan::gpu
