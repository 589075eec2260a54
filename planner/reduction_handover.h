// ReductionHandover: which buffers each reduction stream's latest reduction still holds, and where the lowering frees
// them (Note [Reduction buffers] in schedule.h). Internal to the lowering.
#pragma once

#include <array>
#include <vector>

#include "schedule.h"

namespace shardplan {

class ReductionHandover {
 public:
  // A reduction on `stream` is about to be emitted: it frees, as it starts, what the previous one there still holds.
  void hand_over(StreamKind stream, Op& next) {
    Held& held = held_[static_cast<std::size_t>(stream)];
    next.hands_over_from = held.holder;
    next.frees_previous_reduction = true;
    next.frees_at_start.append(held.buffers.begin(), held.buffers.end());
    held = {};
  }
  // Op `holder` (emitted, of `unit`) keeps `buffers` alive until the next reduction on `stream` starts.
  void hold(StreamKind stream, int holder, int unit, std::vector<MemoryChange> buffers) {
    for (MemoryChange& change : buffers) change.owner_unit = unit;
    std::erase_if(buffers, [](const MemoryChange& change) { return change.bytes == 0; });
    held_[static_cast<std::size_t>(stream)] = {holder, std::move(buffers)};
  }
  // The end of a micro-batch's backward: each stream's last reduction frees its buffers when it completes (FSDP2's
  // final backward callback waits for it).
  void release_at_ends(std::vector<Op>& ops) {
    for (Held& held : held_) {
      if (held.holder >= 0) {
        ops[static_cast<std::size_t>(held.holder)].frees.append(held.buffers.begin(), held.buffers.end());
      }
      held = {};
    }
  }

 private:
  struct Held {
    int holder = -1;  // the reduction whose buffers are still alive
    std::vector<MemoryChange> buffers;
  };
  std::array<Held, kStreamCount> held_{};  // per stream
};

}  // namespace shardplan
