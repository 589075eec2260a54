// CommCounters: how many collectives of each kind a communicator issued and how many bytes they moved.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace shardplan::comm {

// The collectives a Communicator offers (barrier included, so a test can assert there was none in a step).
enum class Collective { all_gather, reduce_scatter, all_reduce, broadcast, barrier };
inline constexpr std::size_t kCollectiveKinds = 5;
const char* to_string(Collective kind);

struct CollectiveTally {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;  // message size S, nccl-tests' convention (see CommCounters)
};

// Counted when a collective is issued (not when it completes), on the calling rank. `bytes` is the message size S as
// nccl-tests defines it (doc/PERFORMANCE.md) and costmodel/collective_cost.h uses it: the gathered output for
// all-gather, the full input for reduce-scatter, the buffer for all-reduce and broadcast, 0 for a barrier. So the
// measured counters compare directly with the simulator's predicted bytes per step.
struct CommCounters {
  std::array<CollectiveTally, kCollectiveKinds> tallies{};

  const CollectiveTally& operator[](Collective kind) const { return tallies[static_cast<std::size_t>(kind)]; }
  CollectiveTally& operator[](Collective kind) { return tallies[static_cast<std::size_t>(kind)]; }
  std::uint64_t calls(Collective kind) const { return (*this)[kind].calls; }
  std::uint64_t bytes(Collective kind) const { return (*this)[kind].bytes; }
  std::uint64_t total_calls() const;
  std::uint64_t total_bytes() const;
  // What happened between two snapshots — the per-step counts a runner test asserts.
  CommCounters since(const CommCounters& before) const;
};

// Point-to-point messages a communicator posted (pipeline parallelism's activations and their gradients), counted
// when posted on the calling rank; `bytes` is the message's size. Kept apart from CommCounters so the collective
// counts a step is asserted against stay exactly the schedule's collective ops.
struct P2pCounters {
  CollectiveTally sends;
  CollectiveTally recvs;
  P2pCounters since(const P2pCounters& before) const;
};

}  // namespace shardplan::comm
