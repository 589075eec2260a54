// CommCounters: names of the collectives, totals and per-step differences.
#include "comm_counters.h"

namespace shardplan::comm {

const char* to_string(Collective kind) {
  switch (kind) {
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_reduce: return "all_reduce";
    case Collective::broadcast: return "broadcast";
    case Collective::barrier: return "barrier";
  }
  return "unknown";
}

std::uint64_t CommCounters::total_calls() const {
  std::uint64_t total = 0;
  for (const auto& tally : tallies) total += tally.calls;
  return total;
}

std::uint64_t CommCounters::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& tally : tallies) total += tally.bytes;
  return total;
}

CommCounters CommCounters::since(const CommCounters& before) const {
  CommCounters delta;
  for (std::size_t i = 0; i < kCollectiveKinds; ++i) {
    delta.tallies[i].calls = tallies[i].calls - before.tallies[i].calls;
    delta.tallies[i].bytes = tallies[i].bytes - before.tallies[i].bytes;
  }
  return delta;
}

P2pCounters P2pCounters::since(const P2pCounters& before) const {
  P2pCounters delta;
  delta.sends = {sends.calls - before.sends.calls, sends.bytes - before.sends.bytes};
  delta.recvs = {recvs.calls - before.recvs.calls, recvs.bytes - before.recvs.bytes};
  return delta;
}

}  // namespace shardplan::comm
