// The GPU runner's gradient bookkeeping kernels: accumulate a reduced shard with the data-parallel mean, scale.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace shardplan::gpu {

// target[i] += scale · source[i] (Note [Gradient mean] in executor/runner/param_group.cpp: scale = 1 / data-parallel
// ranks, applied once after the sum).
void accumulate_scaled(cudaStream_t stream, float* target, const float* source, std::int64_t count, float scale);
// values[i] *= scale.
void scale_in_place(cudaStream_t stream, float* values, std::int64_t count, float scale);

}  // namespace shardplan::gpu
