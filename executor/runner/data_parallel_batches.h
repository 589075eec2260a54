// Data-parallel batches: which dataset batches each rank trains on in a step, and the global batch they form.
#pragma once

#include <cstdint>
#include <vector>

#include "byte_text_dataset.h"
#include "runtime_types.h"

namespace shardplan::runner {

// Note [Data-parallel batches]: all ranks read one dataset stream; in step s, micro-batch m of rank r is batch
// (s·k + m)·world + r (k micro-batches per step). The global batch of the step is all of them, so a single-process
// reference that concatenates them (global_batch) computes the same mean loss and gradient as the whole job.
std::vector<runtime::Batch> rank_micro_batches(const runtime::ByteTextDataset& data, std::int64_t step, int micro_batches,
                                               int world_size, int rank);
// Every rank's micro-batches of step s concatenated into one batch (rows in (micro-batch, rank) order).
runtime::Batch global_batch(const runtime::ByteTextDataset& data, std::int64_t step, int micro_batches, int world_size);

}  // namespace shardplan::runner
