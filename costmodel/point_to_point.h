// point_to_point_time_s: one NCCL send/recv between two ranks (a pipeline stage's boundary tensor), over the tier
// that joins them.
#pragma once

#include <cstdint>

#include "hardware_profile.h"

namespace shardplan {

// Note [Point-to-point cost]: nccl-tests' sendrecv_perf counts busbw = algbw (bus factor 1: each rank's S bytes cross
// its one link once) in one step. A 2-rank ring all-gather of 2S is that same transfer: its bus factor (n − 1)/n = ½
// puts S on the link, in n − 1 = 1 latency step. So the time is collective_cost's for that all-gather, over the same
// α-β model, efficiency curve and tier (Note [Rails] in collective_cost.cpp): within a node the GPU's link, across
// nodes one GPU's share of the node's network (its rail), as a pipeline neighbour on another node is reached.
double point_to_point_time_s(std::int64_t bytes, bool crosses_nodes, const HardwareProfile& profile);

}  // namespace shardplan
