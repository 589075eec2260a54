// Communicator: argument validation and collective counting shared by every backend.
#include "communicator.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "errors.h"

namespace shardplan::comm {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "unknown";
}

namespace {

// Whether [a, a+a_count) and [b, b+b_count) share an element. std::less gives a total order on unrelated pointers.
bool overlaps(const float* a, std::size_t a_count, const float* b, std::size_t b_count) {
  if (a_count == 0 || b_count == 0) return false;
  const std::less<const float*> before;
  return before(a, b + b_count) && before(b, a + a_count);
}

// Whether count · ranks floats can be addressed in size_t bytes (no wrap-around in the size computations).
bool product_fits(std::size_t count, int ranks) {
  return count <= std::numeric_limits<std::size_t>::max() / sizeof(float) / static_cast<std::size_t>(ranks);
}

}  // namespace

int Communicator::world_rank() const {
  const Group& members = group();
  const int r = rank();
  return r >= 0 && r < members.size() ? members.world_ranks[static_cast<std::size_t>(r)] : -1;
}

void Communicator::fail(const std::string& message, std::source_location where) const {
  throw InternalError(std::string(backend_name()) + " communicator (rank " + std::to_string(world_rank()) +
                          "): " + message,
                      where, world_rank());
}

std::string Communicator::describe_group() const {
  std::string text = "ranks ";
  const Group& members = group();
  for (std::size_t i = 0; i < members.world_ranks.size(); ++i) {
    // A long group is named by its ends: the line must stay one readable line.
    if (members.world_ranks.size() > 8 && i == 3) {
      text += ",...";
      i = members.world_ranks.size() - 2;
      continue;
    }
    text += (i == 0 ? "" : ",") + std::to_string(members.world_ranks[i]);
  }
  return text;
}

std::string Communicator::take_label(const char* kind, std::size_t count) {
  if (!wait_observer_) {  // nobody reads it: no string work per collective
    next_label_.clear();
    return {};
  }
  std::string label = std::move(next_label_);
  if (label.empty()) {
    label = std::string(kind) == "barrier" ? std::string("a barrier")
                                           : std::string(kind) + " of " + std::to_string(count) + " elements";
  }
  next_label_.clear();
  return label + " over " + describe_group();
}

void Communicator::count(Collective kind, std::size_t elements) {
  count_issued(kind, static_cast<std::uint64_t>(elements) * sizeof(float));
}

void Communicator::count_issued(Collective kind, std::uint64_t bytes) {
  CollectiveTally& tally = counters_[kind];
  tally.calls += 1;
  tally.bytes += bytes;
}

CommHandle Communicator::all_gather(const float* send, std::size_t count_per_rank, float* recv) {
  if (!product_fits(count_per_rank, size())) fail("all_gather: count_per_rank × ranks overflows");
  const std::size_t total = count_per_rank * static_cast<std::size_t>(size());
  if (count_per_rank > 0 && (send == nullptr || recv == nullptr)) fail("all_gather: null buffer with a non-zero count");
  const bool in_place = count_per_rank > 0 && send == recv + static_cast<std::size_t>(rank()) * count_per_rank;
  if (!in_place && overlaps(send, count_per_rank, recv, total)) {
    fail("all_gather: send overlaps recv other than at this rank's slot (in place)");
  }
  std::string label = take_label("all_gather", total);
  CommHandle handle = start_all_gather(send, count_per_rank, recv);
  this->count(Collective::all_gather, total);  // counted once it was issued
  return std::move(handle).observed(wait_observer_, std::move(label));
}

CommHandle Communicator::reduce_scatter(const float* send, float* recv, std::size_t count, ReduceOp op) {
  if (!product_fits(count, size())) fail("reduce_scatter: count × ranks overflows");
  const std::size_t total = count * static_cast<std::size_t>(size());
  if (count > 0 && (send == nullptr || recv == nullptr)) fail("reduce_scatter: null buffer with a non-zero count");
  // MPI forbids aliased arguments (MPI 3.1 §2.3); the in-place form of MPI_Reduce_scatter_block means something else.
  if (overlaps(send, total, recv, count)) fail("reduce_scatter: send and recv overlap");
  std::string label = take_label("reduce_scatter", total);
  CommHandle handle = start_reduce_scatter(send, recv, count, op);
  this->count(Collective::reduce_scatter, total);  // counted once it was issued
  return std::move(handle).observed(wait_observer_, std::move(label));
}

CommHandle Communicator::all_reduce(float* buffer, std::size_t count, ReduceOp op) {
  if (count > 0 && buffer == nullptr) fail("all_reduce: null buffer with a non-zero count");
  std::string label = take_label("all_reduce", count);
  CommHandle handle = start_all_reduce(buffer, count, op);
  this->count(Collective::all_reduce, count);  // counted once it was issued
  return std::move(handle).observed(wait_observer_, std::move(label));
}

CommHandle Communicator::broadcast(float* buffer, std::size_t count, int root) {
  if (root < 0 || root >= size()) {
    fail("broadcast: root " + std::to_string(root) + " is not a rank of a group of " + std::to_string(size()));
  }
  if (count > 0 && buffer == nullptr) fail("broadcast: null buffer with a non-zero count");
  std::string label = take_label("broadcast", count);
  CommHandle handle = start_broadcast(buffer, count, root);
  this->count(Collective::broadcast, count);  // counted once it was issued
  return std::move(handle).observed(wait_observer_, std::move(label));
}

void Communicator::check_p2p(const char* what, const float* buffer, std::size_t count, int peer, int tag) const {
  if (peer < 0 || peer >= size() || peer == rank()) {
    fail(std::string(what) + ": peer " + std::to_string(peer) + " is not another rank of a group of " +
         std::to_string(size()));
  }
  if (tag < 0 || tag > kMaxP2pTag) fail(std::string(what) + ": tag " + std::to_string(tag) + " outside [0, 32767]");
  if (count > 0 && buffer == nullptr) fail(std::string(what) + ": null buffer with a non-zero count");
}

CommHandle Communicator::send(const float* buffer, std::size_t count, int peer, int tag) {
  check_p2p("send", buffer, count, peer, tag);
  std::string label = take_label("send", count);
  CommHandle handle = start_send(buffer, count, peer, tag);
  p2p_counters_.sends.calls += 1;
  p2p_counters_.sends.bytes += static_cast<std::uint64_t>(count) * sizeof(float);
  return std::move(handle).observed(wait_observer_, std::move(label));
}

CommHandle Communicator::recv(float* buffer, std::size_t count, int peer, int tag) {
  check_p2p("recv", buffer, count, peer, tag);
  std::string label = take_label("recv", count);
  CommHandle handle = start_recv(buffer, count, peer, tag);
  p2p_counters_.recvs.calls += 1;
  p2p_counters_.recvs.bytes += static_cast<std::uint64_t>(count) * sizeof(float);
  return std::move(handle).observed(wait_observer_, std::move(label));
}

CommHandle Communicator::start_send(const float*, std::size_t, int, int) {
  fail(std::string("point-to-point send is not implemented by the ") + backend_name() + " backend");
}

CommHandle Communicator::start_recv(float*, std::size_t, int, int) {
  fail(std::string("point-to-point recv is not implemented by the ") + backend_name() + " backend");
}

void Communicator::barrier() {
  if (wait_observer_) wait_observer_->waiting_on(take_label("barrier", 0));
  try {
    run_barrier();
  } catch (...) {
    if (wait_observer_) wait_observer_->done_waiting();
    throw;
  }
  if (wait_observer_) wait_observer_->done_waiting();
  count(Collective::barrier, 0);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  if (color < 0) fail("split: colour must be >= 0 (every rank joins some group), got " + std::to_string(color));
  std::unique_ptr<Communicator> child = make_split(color, key);
  child->set_wait_observer(wait_observer_);  // Note [Step watchdog]: the groups of a run are watched too
  return child;
}

}  // namespace shardplan::comm
