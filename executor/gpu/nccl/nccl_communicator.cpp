// NcclCommunicator: communicator lifetime, the two collective streams, event-backed handles, typed collectives, split.
#include "nccl_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <thread>
#include <utility>

#include "cuda_check.h"
#include "errors.h"
#include "mpi_check.h"
#include "nccl_bootstrap.h"
#include "nccl_check.h"

// ncclCommSplit arrived in NCCL 2.18.
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0), "NcclCommunicator needs NCCL >= 2.18 (ncclCommSplit)");

namespace shardplan::gpu {

const char* to_string(DeviceDataType type) {
  switch (type) {
    case DeviceDataType::f32: return "f32";
    case DeviceDataType::bf16: return "bf16";
  }
  return "unknown";
}

std::size_t size_of(DeviceDataType type) { return type == DeviceDataType::bf16 ? 2 : 4; }

// The NCCL communicator as its handles see it: null once the communicator was destroyed or aborted.
struct NcclCommunicator::Shared {
  ncclComm_t nccl = nullptr;
};

namespace {

ncclDataType_t nccl_type(DeviceDataType type) { return type == DeviceDataType::bf16 ? ncclBfloat16 : ncclFloat32; }

ncclRedOp_t nccl_op(comm::ReduceOp op) {
  switch (op) {
    case comm::ReduceOp::sum: return ncclSum;
    case comm::ReduceOp::max: return ncclMax;
    case comm::ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// Makes `device` current for a scope and restores the caller's device: this communicator's streams, events and NCCL
// calls belong to its device, while the caller may be working on another.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) CUDA_CHECK(cudaSetDevice(device_));
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);  // best effort: a destructor must not throw
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

// One collective in flight: an event recorded after it on its stream (Note [Waiting on the GPU]).
class NcclPending final : public comm::PendingCollective {
 public:
  explicit NcclPending(std::shared_ptr<NcclCommunicator::Shared> shared) : shared_(std::move(shared)) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~NcclPending() override { cudaEventDestroy(event_); }
  NcclPending(const NcclPending&) = delete;
  NcclPending& operator=(const NcclPending&) = delete;

  void record(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(event_, stream)); }

  bool test() override {
    const cudaError_t state = cudaEventQuery(event_);
    if (state == cudaSuccess) return true;
    // Anything else is a fault on the device (e.g. an illegal address in some kernel), reported here.
    if (state != cudaErrorNotReady) throw_cuda_error(state, "cudaEventQuery(event_)", std::source_location::current());
    // "Not ready" is no error; should the runtime have kept it as this thread's last error, drop it so that the
    // runner's next CUDA_CHECK_LAUNCH does not report it (PyTorch's CUDAStream::query clears it the same way).
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    if (shared_->nccl == nullptr) {
      throw InternalError("an NCCL collective can no longer complete: its communicator was destroyed or aborted",
                          std::source_location::current(), nccl_error_rank());
    }
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(shared_->nccl, &async));
    // ncclInProgress is a communicator still being set up or finalised, not a failure.
    if (async != ncclSuccess && async != ncclInProgress) {
      throw_nccl_error(async, "an NCCL collective (asynchronous error of its communicator)",
                       std::source_location::current());
    }
    return false;
  }

  void wait() override {
    // Polling, not cudaEventSynchronize: an NCCL failure must surface (Note [Waiting on the GPU]).
    while (!test()) std::this_thread::yield();
  }

 private:
  std::shared_ptr<NcclCommunicator::Shared> shared_;
  cudaEvent_t event_ = nullptr;
};

// Whether byte ranges [a, a+a_bytes) and [b, b+b_bytes) share a byte. std::less orders unrelated pointers.
bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  const std::less<const unsigned char*> before;
  return before(x, y + b_bytes) && before(y, x + a_bytes);
}

// Whether count · ranks elements of `element` bytes are addressable in size_t bytes.
bool product_fits(std::size_t count, int ranks, std::size_t element) {
  return count <= std::numeric_limits<std::size_t>::max() / element / static_cast<std::size_t>(ranks);
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm parent) {
  MPI_CHECK(MPI_Comm_dup(parent, &mpi_));
  try {
    MPI_CHECK(MPI_Comm_set_errhandler(mpi_, MPI_ERRORS_RETURN));
    CUDA_CHECK(cudaGetDevice(&device_));
    nccl_ = init_nccl_comm(mpi_);
  } catch (...) {
    release();
    throw;
  }
  init();
}

NcclCommunicator::NcclCommunicator(Adopt, MPI_Comm mpi, ncclComm_t nccl, int device)
    : mpi_(mpi), nccl_(nccl), device_(device) {
  init();
}

void NcclCommunicator::init() {
  try {
    shared_ = std::make_shared<Shared>();
    shared_->nccl = nccl_;
    MPI_CHECK(MPI_Comm_rank(mpi_, &rank_));
    MPI_CHECK(MPI_Comm_size(mpi_, &size_));
    group_.world_ranks = world_ranks_of(mpi_);
    const DeviceGuard on(device_);
    int least = 0;
    int greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // Lower numbers are higher priorities; -1 as FSDP2 uses, or the highest the device has if that is lower.
    const int priority = std::clamp(-1, greatest, least);
    CUDA_CHECK(cudaStreamCreateWithPriority(&all_gather_stream_, cudaStreamNonBlocking, priority));
    CUDA_CHECK(cudaStreamCreateWithPriority(&reduce_stream_, cudaStreamNonBlocking, priority));
  } catch (...) {
    release();
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() { release(); }

void NcclCommunicator::release() noexcept {
  // Best effort throughout: a destructor reports, never throws. The device is switched only when there is something
  // of ours on it, so a failed construction on a machine without a device leaves no stale CUDA error behind.
  int previous = -1;
  const bool on_device = nccl_ != nullptr || all_gather_stream_ != nullptr || reduce_stream_ != nullptr;
  if (on_device && cudaGetDevice(&previous) == cudaSuccess && previous != device_) cudaSetDevice(device_);
  if (nccl_ != nullptr) {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(nccl_, &async);
    // NCCL's documented teardown: Finalize flushes every issued collective (on a blocking communicator it returns
    // once they completed), then Destroy frees the resources. A communicator in error cannot finalise; abort it.
    const ncclResult_t failure = queried != ncclSuccess ? queried : async;
    const ncclResult_t finalized = failure == ncclSuccess ? ncclCommFinalize(nccl_) : failure;
    if (finalized == ncclSuccess) {
      const ncclResult_t destroyed = ncclCommDestroy(nccl_);
      if (destroyed != ncclSuccess) {
        std::fprintf(stderr, "shardplan: rank %d: ncclCommDestroy failed: %s\n", nccl_error_rank(),
                     ncclGetErrorString(destroyed));
      }
    } else {
      std::fprintf(stderr, "shardplan: rank %d: NCCL communicator in error (%s); aborting it\n", nccl_error_rank(),
                   ncclGetErrorString(finalized));
      ncclCommAbort(nccl_);
    }
    nccl_ = nullptr;
  }
  if (shared_) shared_->nccl = nullptr;
  // After the communicator, so nothing of ours is queued on them any more.
  if (all_gather_stream_ != nullptr) cudaStreamDestroy(all_gather_stream_);
  if (reduce_stream_ != nullptr) cudaStreamDestroy(reduce_stream_);
  all_gather_stream_ = nullptr;
  reduce_stream_ = nullptr;
  if (on_device && previous >= 0 && previous != device_) cudaSetDevice(previous);
  int finalized = 0;
  MPI_Finalized(&finalized);
  // As MpiCommunicator: a duplicate outliving MPI_Finalize can only be dropped.
  if (!finalized && mpi_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_);
  mpi_ = MPI_COMM_NULL;
}

cudaStream_t NcclCommunicator::stream(comm::Collective kind) const {
  switch (kind) {
    case comm::Collective::all_gather:
    case comm::Collective::broadcast: return all_gather_stream_;
    case comm::Collective::reduce_scatter:
    case comm::Collective::all_reduce: return reduce_stream_;
    case comm::Collective::barrier: break;
  }
  fail(std::string("stream: a ") + comm::to_string(kind) + " runs on no stream");
}

comm::CommHandle NcclCommunicator::completion_on(cudaStream_t stream) {
  auto pending = std::make_unique<NcclPending>(shared_);
  pending->record(stream);
  return comm::CommHandle(std::move(pending));
}

// Zero counts: every rank of a collective has the same count, so every rank skips the NCCL call alike and gets a
// completed handle; nothing is enqueued (NCCL itself returns at once for count 0, but checks the buffers first).
comm::CommHandle NcclCommunicator::issue_all_gather(const void* send, std::size_t count_per_rank, void* recv,
                                                    ncclDataType_t type) {
  if (count_per_rank == 0) return {};
  const DeviceGuard on(device_);
  NCCL_CHECK(ncclAllGather(send, recv, count_per_rank, type, nccl_, all_gather_stream_));
  return completion_on(all_gather_stream_);
}

comm::CommHandle NcclCommunicator::issue_reduce_scatter(const void* send, void* recv, std::size_t count,
                                                        ncclDataType_t type, comm::ReduceOp op) {
  if (count == 0) return {};
  const DeviceGuard on(device_);
  NCCL_CHECK(ncclReduceScatter(send, recv, count, type, nccl_op(op), nccl_, reduce_stream_));
  return completion_on(reduce_stream_);
}

comm::CommHandle NcclCommunicator::start_all_gather(const float* send, std::size_t count_per_rank, float* recv) {
  return issue_all_gather(send, count_per_rank, recv, ncclFloat32);
}

comm::CommHandle NcclCommunicator::start_reduce_scatter(const float* send, float* recv, std::size_t count,
                                                        comm::ReduceOp op) {
  return issue_reduce_scatter(send, recv, count, ncclFloat32, op);
}

comm::CommHandle NcclCommunicator::start_all_reduce(float* buffer, std::size_t count, comm::ReduceOp op) {
  if (count == 0) return {};
  const DeviceGuard on(device_);
  NCCL_CHECK(ncclAllReduce(buffer, buffer, count, ncclFloat32, nccl_op(op), nccl_, reduce_stream_));
  return completion_on(reduce_stream_);
}

comm::CommHandle NcclCommunicator::start_broadcast(float* buffer, std::size_t count, int root) {
  if (count == 0) return {};
  const DeviceGuard on(device_);
  NCCL_CHECK(ncclBroadcast(buffer, buffer, count, ncclFloat32, root, nccl_, all_gather_stream_));
  return completion_on(all_gather_stream_);
}

void NcclCommunicator::run_barrier() { MPI_CHECK(MPI_Barrier(mpi_)); }

std::unique_ptr<comm::Communicator> NcclCommunicator::make_split(int color, int key) {
  MPI_Comm child_mpi = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(mpi_, color, key, &child_mpi));
  ncclComm_t child_nccl = nullptr;
  try {
    const DeviceGuard on(device_);
    // A null config: the child inherits the parent's (blocking, no resource sharing) — Note [Blocking init].
    NCCL_CHECK(ncclCommSplit(nccl_, color, key, &child_nccl, nullptr));
  } catch (...) {
    MPI_Comm_free(&child_mpi);
    throw;
  }
  std::unique_ptr<NcclCommunicator> child(new NcclCommunicator(Adopt{}, child_mpi, child_nccl, device_));
  int nccl_rank = -1;
  int nccl_size = 0;
  NCCL_CHECK(ncclCommUserRank(child_nccl, &nccl_rank));
  NCCL_CHECK(ncclCommCount(child_nccl, &nccl_size));
  if (nccl_rank != child->rank() || nccl_size != child->size()) {
    fail("split: NCCL placed this rank at " + std::to_string(nccl_rank) + " of " + std::to_string(nccl_size) +
         " but MPI at " + std::to_string(child->rank()) + " of " + std::to_string(child->size()));
  }
  return child;
}

comm::CommHandle NcclCommunicator::all_gather(const void* send, std::size_t count_per_rank, void* recv,
                                              DeviceDataType type) {
  if (type == DeviceDataType::f32) {
    return all_gather(static_cast<const float*>(send), count_per_rank, static_cast<float*>(recv));
  }
  // The float overload's checks (communicator.cpp), in bytes of `type`.
  const std::size_t element = size_of(type);
  if (!product_fits(count_per_rank, size(), element)) fail("all_gather: count_per_rank × ranks overflows");
  const std::size_t total = count_per_rank * static_cast<std::size_t>(size());
  if (count_per_rank > 0 && (send == nullptr || recv == nullptr)) fail("all_gather: null buffer with a non-zero count");
  const bool in_place = count_per_rank > 0 && send == static_cast<const unsigned char*>(recv) +
                                                          static_cast<std::size_t>(rank()) * count_per_rank * element;
  if (!in_place && overlaps(send, count_per_rank * element, recv, total * element)) {
    fail("all_gather: send overlaps recv other than at this rank's slot (in place)");
  }
  std::string label = take_label("all_gather", total);  // Note [Step watchdog], as the float overload does
  comm::CommHandle handle = issue_all_gather(send, count_per_rank, recv, nccl_type(type));
  count_issued(comm::Collective::all_gather, static_cast<std::uint64_t>(total) * element);
  return std::move(handle).observed(wait_observer(), std::move(label));
}

comm::CommHandle NcclCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count,
                                                  DeviceDataType type, comm::ReduceOp op) {
  if (type == DeviceDataType::f32) {
    return reduce_scatter(static_cast<const float*>(send), static_cast<float*>(recv), count, op);
  }
  const std::size_t element = size_of(type);
  if (!product_fits(count, size(), element)) fail("reduce_scatter: count × ranks overflows");
  const std::size_t total = count * static_cast<std::size_t>(size());
  if (count > 0 && (send == nullptr || recv == nullptr)) fail("reduce_scatter: null buffer with a non-zero count");
  if (overlaps(send, total * element, recv, count * element)) fail("reduce_scatter: send and recv overlap");
  std::string label = take_label("reduce_scatter", total);
  comm::CommHandle handle = issue_reduce_scatter(send, recv, count, nccl_type(type), op);
  count_issued(comm::Collective::reduce_scatter, static_cast<std::uint64_t>(total) * element);
  return std::move(handle).observed(wait_observer(), std::move(label));
}

void NcclCommunicator::abort(const std::string& message) {
  std::fprintf(stderr, "shardplan: rank %d aborting the job: %s\n", world_rank(), message.c_str());
  std::fflush(stderr);
  // Abort NCCL first so that no kernel of ours keeps spinning on a peer while MPI tears the job down.
  if (nccl_ != nullptr) ncclCommAbort(nccl_);
  nccl_ = nullptr;
  if (shared_) shared_->nccl = nullptr;
  MPI_Abort(MPI_COMM_WORLD, comm::kExitAborted);
  std::abort();  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

}  // namespace shardplan::gpu
