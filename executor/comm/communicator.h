// Communicator: the backend-neutral collective interface of the executor (MPI now, NCCL later) and its Group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "comm_counters.h"
#include "comm_handle.h"

namespace shardplan::comm {

enum class ReduceOp { sum, max, min };
const char* to_string(ReduceOp op);

// Which ranks a communicator spans: its members' world ranks, in the order of their rank inside the group.
struct Group {
  std::vector<int> world_ranks;
  int size() const { return static_cast<int>(world_ranks.size()); }
};

// Note [Aborted status]: a job brought down after it began (a rank failed mid-run: a full disk at a checkpoint or
// --trace, the step watchdog) exits with this status — mpirun's is the code MPI_Abort is given — so that it is told
// apart from bad input (2, refused before anything ran) and an internal error (1). README, "Exit status".
inline constexpr int kExitAborted = 4;

// The largest point-to-point tag every backend accepts: MPI guarantees MPI_TAG_UB ≥ 32767 (MPI 3.1 §8.1.2).
inline constexpr int kMaxP2pTag = 32767;

// Every collective is asynchronous: it is issued on return and completes when its CommHandle says so (so the
// all-gather of the next FSDP unit runs while the current unit computes). Buffers are float, sizes are element
// counts, and any count is valid, 0 and odd ones included (callers pad flat parameters; the communicator doesn't
// require it). Collectives on one communicator must be issued in the same order on every rank of its group, as MPI
// 3.1 §5.12 and NCCL both require; collectives on different communicators are independent.
//
// A communicator is driven by one thread at a time (the runner's); a backend's own threads stay inside it.
//
// The public calls validate their arguments, hand over to the backend's start_* hook and count the issued collective
// (counters()) — so every backend validates and counts identically (the non-virtual interface idiom).
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const Group& group() const = 0;
  virtual const char* backend_name() const = 0;

  // recv[r·count_per_rank + i] = send_of_rank_r[i]. `send` may be recv + rank()·count_per_rank (in place, as FSDP keeps
  // its shard inside the unsharded buffer); otherwise the buffers must not overlap.
  CommHandle all_gather(const float* send, std::size_t count_per_rank, float* recv);
  // recv[i] = op over ranks r of send_of_rank_r[rank()·count + i]; `send` holds size()·count elements. No overlap.
  CommHandle reduce_scatter(const float* send, float* recv, std::size_t count, ReduceOp op = ReduceOp::sum);
  // buffer[i] = op over ranks r of buffer_of_rank_r[i], in place.
  CommHandle all_reduce(float* buffer, std::size_t count, ReduceOp op = ReduceOp::sum);
  // buffer = buffer_of_rank_root on every rank.
  CommHandle broadcast(float* buffer, std::size_t count, int root);
  // Point-to-point, asynchronous like the collectives: `count` floats to (from) the group's rank `peer`, matched by
  // (peer, tag) as MPI matches them (MPI 3.1 §3.5: messages of one sender and tag arrive in the order sent). Unlike
  // collectives they need no common order over the group; tag in [0, kMaxP2pTag]. Counted in p2p_counters().
  CommHandle send(const float* buffer, std::size_t count, int peer, int tag);
  CommHandle recv(float* buffer, std::size_t count, int peer, int tag);
  // Blocks until every rank of the group reached it.
  void barrier();
  // Collective over this group: ranks with the same colour (>= 0) form one new group, ordered by (key, rank) as
  // MPI_Comm_split orders them (MPI 3.1 §6.4.2). The new communicator has the same backend and options.
  std::unique_ptr<Communicator> split(int color, int key);
  // Prints the message with this rank and brings down every rank of the job (MPI_Abort with kExitAborted), so one
  // failing rank never leaves the others waiting in a collective. Never returns.
  [[noreturn]] virtual void abort(const std::string& message) = 0;

  const CommCounters& counters() const { return counters_; }
  const P2pCounters& p2p_counters() const { return p2p_counters_; }
  void reset_counters() {
    counters_ = CommCounters{};
    p2p_counters_ = P2pCounters{};
  }

  // Note [Step watchdog] (step_watchdog.h): told what this rank blocks on in each wait of a collective started here
  // or on a communicator split from this one afterwards. Null: nobody is told.
  void set_wait_observer(std::shared_ptr<WaitObserver> observer) { wait_observer_ = std::move(observer); }
  const std::shared_ptr<WaitObserver>& wait_observer() const { return wait_observer_; }
  // Names the next collective issued here in what the observer is told ("all_gather of unit 'model.layers.3'");
  // otherwise it is the collective's kind, size and group.
  void label_next(std::string label) { next_label_ = std::move(label); }

 protected:
  // Hooks for a backend. Arguments are already validated; zero counts reach the backend too, because every rank must
  // take part in every collective whatever its count.
  virtual CommHandle start_all_gather(const float* send, std::size_t count_per_rank, float* recv) = 0;
  virtual CommHandle start_reduce_scatter(const float* send, float* recv, std::size_t count, ReduceOp op) = 0;
  virtual CommHandle start_all_reduce(float* buffer, std::size_t count, ReduceOp op) = 0;
  virtual CommHandle start_broadcast(float* buffer, std::size_t count, int root) = 0;
  virtual void run_barrier() = 0;
  virtual std::unique_ptr<Communicator> make_split(int color, int key) = 0;
  // Point-to-point hooks; a backend without them (NCCL's, until a runner needs it there) refuses with InternalError.
  virtual CommHandle start_send(const float* buffer, std::size_t count, int peer, int tag);
  virtual CommHandle start_recv(float* buffer, std::size_t count, int peer, int tag);

  // Counts a collective a backend issued through its own typed entry point (NCCL's bf16 collectives), with its
  // message size in bytes, so the counters hold every collective whatever its element type.
  void count_issued(Collective kind, std::uint64_t bytes);
  // This rank's world rank, for the rank every error carries.
  int world_rank() const;
  // The label of the collective being issued: label_next's, once, or "<kind> of <count> elements over ranks a,b,c";
  // empty without an observer.
  std::string take_label(const char* kind, std::size_t count);
  // The members as text ("ranks 0,1,2"), for messages.
  std::string describe_group() const;
  // Throws InternalError carrying this rank and the caller's file:line.
  [[noreturn]] void fail(const std::string& message,
                         std::source_location where = std::source_location::current()) const;

 private:
  void count(Collective kind, std::size_t elements);

  void check_p2p(const char* what, const float* buffer, std::size_t count, int peer, int tag) const;
  CommCounters counters_;
  P2pCounters p2p_counters_;
  std::shared_ptr<WaitObserver> wait_observer_;
  std::string next_label_;
};

}  // namespace shardplan::comm
