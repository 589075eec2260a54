// run_indexed: a task per index, on up to N threads, with the results and the error a sequential loop would give —
// what the capacity sweep, the tensor-parallel degrees and the knob-setting waves run on.
#pragma once

#include <cstddef>
#include <functional>

namespace shardplan {

// Note [Indexed pool]: calls task(i) for every i in [0, count) on up to `threads` threads (the caller's among them,
// std::jthread for the rest), each thread taking the next unclaimed index. A task writes its result at its own index,
// so the results do not depend on the thread count or the timing. Once a task throws, no further index is claimed;
// after every thread has joined, the lowest failing index's exception is rethrown — the one a sequential loop would
// have thrown, as every lower index was claimed before it and ran to its end. threads <= 1: a plain loop.
void run_indexed(std::size_t count, std::size_t threads, const std::function<void(std::size_t)>& task);

}  // namespace shardplan
