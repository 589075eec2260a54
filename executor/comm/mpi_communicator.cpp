// MpiCommunicator: communicator lifetime, groups, abort, and the launch of every collective by the chosen mechanism.
#include "mpi_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "errors.h"
#include "mpi_check.h"
#include "mpi_comm_thread.h"

namespace shardplan::comm {

const char* to_string(AsyncMechanism mechanism) {
  switch (mechanism) {
    case AsyncMechanism::nonblocking: return "nonblocking";
    case AsyncMechanism::comm_thread: return "comm_thread";
  }
  return "unknown";
}

AsyncMechanism parse_async_mechanism(const std::string& name) {
  if (name == "nonblocking") return AsyncMechanism::nonblocking;
  if (name == "comm_thread") return AsyncMechanism::comm_thread;
  throw InputError("unknown communication mechanism '" + name + "': expected nonblocking or comm_thread");
}

namespace {

// One MPI-3 non-blocking collective in flight; progress happens inside MPI_Test / MPI_Wait (Note [Progress]).
class MpiRequest final : public PendingCollective {
 public:
  explicit MpiRequest(MPI_Request request) : request_(request) {}
  bool test() override {
    int flag = 0;
    MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  }
  void wait() override { MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE)); }

 private:
  MPI_Request request_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm parent, MpiCommOptions options) : options_(options) {
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(parent, &dup));
  init(dup);
}

MpiCommunicator::MpiCommunicator(Adopt, MPI_Comm owned, MpiCommOptions options) : options_(options) { init(owned); }

void MpiCommunicator::init(MPI_Comm owned) {
  comm_ = owned;
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));

  // Members as world ranks (MPI_Group_translate_ranks, MPI 3.1 §6.3.1), so errors and traces name ranks the way mpirun does.
  MPI_Group mine = MPI_GROUP_NULL;
  MPI_Group world = MPI_GROUP_NULL;
  MPI_CHECK(MPI_Comm_group(comm_, &mine));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> local(static_cast<std::size_t>(size_));
  std::iota(local.begin(), local.end(), 0);
  group_.world_ranks.assign(local.size(), -1);
  MPI_CHECK(MPI_Group_translate_ranks(mine, size_, local.data(), world, group_.world_ranks.data()));
  MPI_CHECK(MPI_Group_free(&mine));
  MPI_CHECK(MPI_Group_free(&world));

  if (options_.mechanism == AsyncMechanism::comm_thread) {
    int provided = MPI_THREAD_SINGLE;
    MPI_CHECK(MPI_Query_thread(&provided));
    if (provided < MPI_THREAD_MULTIPLE) {
      MPI_Comm_free(&comm_);
      fail("the comm_thread mechanism needs MPI_THREAD_MULTIPLE (MpiSession requests it by default); this MPI "
           "provides less — use AsyncMechanism::nonblocking");
    }
    thread_ = std::make_unique<CommThread>();
  }
}

MpiCommunicator::~MpiCommunicator() {
  thread_.reset();  // completes every collective already queued before the communicator goes away
  int finalized = 0;
  MPI_Finalized(&finalized);
  // MPI_Comm_free is collective in the standard but lets pending operations finish (MPI 3.1 §6.4.3). A communicator
  // outliving MPI_Finalize can only be dropped.
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

CommHandle MpiCommunicator::launch(MpiCollectiveCall call) {
  if (thread_) {
    const MPI_Comm comm = comm_;
    return thread_->submit([run = std::move(call.run), comm] { run(comm); });
  }
  MPI_Request request = MPI_REQUEST_NULL;
  call.start(comm_, &request);
  return CommHandle(std::make_unique<MpiRequest>(request));
}

CommHandle MpiCommunicator::start_all_gather(const float* send, std::size_t count_per_rank, float* recv) {
  return launch(mpi_all_gather(send, count_per_rank, recv, rank_));
}

CommHandle MpiCommunicator::start_reduce_scatter(const float* send, float* recv, std::size_t count, ReduceOp op) {
  return launch(mpi_reduce_scatter(send, recv, count, op));
}

CommHandle MpiCommunicator::start_all_reduce(float* buffer, std::size_t count, ReduceOp op) {
  return launch(mpi_all_reduce(buffer, count, op));
}

CommHandle MpiCommunicator::start_broadcast(float* buffer, std::size_t count, int root) {
  return launch(mpi_broadcast(buffer, count, root));
}

// Point-to-point is always started non-blocking from the caller's thread, whatever the mechanism: a comm thread runs
// its queue in order, so a blocking send queued before the recv its peer waits on would deadlock two ranks that
// exchange in both directions (1F1B's forward activations one way, gradients the other).
CommHandle MpiCommunicator::start_send(const float* buffer, std::size_t count, int peer, int tag) {
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_send(buffer, count, peer, tag).start(comm_, &request);
  return CommHandle(std::make_unique<MpiRequest>(request));
}

CommHandle MpiCommunicator::start_recv(float* buffer, std::size_t count, int peer, int tag) {
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_recv(buffer, count, peer, tag).start(comm_, &request);
  return CommHandle(std::make_unique<MpiRequest>(request));
}

// Barrier and split are collectives on the same communicator, so with a comm thread they queue behind what was issued
// before (CommThread's FIFO keeps the order MPI requires) instead of racing it from the caller's thread.
void MpiCommunicator::run_barrier() {
  const MPI_Comm comm = comm_;
  if (thread_) {
    thread_->run_in_order([comm] { MPI_CHECK(MPI_Barrier(comm)); });
  } else {
    MPI_CHECK(MPI_Barrier(comm));
  }
}

std::unique_ptr<Communicator> MpiCommunicator::make_split(int color, int key) {
  const MPI_Comm comm = comm_;
  MPI_Comm child = MPI_COMM_NULL;
  auto split = [comm, color, key, &child] { MPI_CHECK(MPI_Comm_split(comm, color, key, &child)); };
  if (thread_) {
    thread_->run_in_order(split);
  } else {
    split();
  }
  return std::unique_ptr<Communicator>(new MpiCommunicator(Adopt{}, child, options_));
}

void MpiCommunicator::abort(const std::string& message) {
  std::fprintf(stderr, "shardplan: rank %d aborting the job: %s\n", world_rank(), message.c_str());
  std::fflush(stderr);
  // MPI_COMM_WORLD, not comm_: a failure in a sub-group must still bring down every rank (MPI 3.1 §8.7; Open MPI
  // aborts the whole job either way). The error code becomes mpirun's exit status.
  MPI_Abort(MPI_COMM_WORLD, kExitAborted);
  std::abort();  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

}  // namespace shardplan::comm
