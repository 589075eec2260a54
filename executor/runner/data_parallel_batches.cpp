// Data-parallel batches of a step (Note [Data-parallel batches]).
#include "data_parallel_batches.h"

namespace shardplan::runner {

namespace {

std::uint64_t batch_index(std::int64_t step, int micro, int micro_batches, int world_size, int rank) {
  return static_cast<std::uint64_t>((step * micro_batches + micro) * world_size + rank);
}

}  // namespace

std::vector<runtime::Batch> rank_micro_batches(const runtime::ByteTextDataset& data, std::int64_t step, int micro_batches,
                                               int world_size, int rank) {
  std::vector<runtime::Batch> batches;
  for (int micro = 0; micro < micro_batches; ++micro) {
    batches.push_back(data.batch_at(batch_index(step, micro, micro_batches, world_size, rank)));
  }
  return batches;
}

runtime::Batch global_batch(const runtime::ByteTextDataset& data, std::int64_t step, int micro_batches, int world_size) {
  runtime::Batch global;
  for (int micro = 0; micro < micro_batches; ++micro) {
    for (int rank = 0; rank < world_size; ++rank) {
      const runtime::Batch part = data.batch_at(batch_index(step, micro, micro_batches, world_size, rank));
      global.micro_batch += part.micro_batch;
      global.seq_len = part.seq_len;
      global.tokens.insert(global.tokens.end(), part.tokens.begin(), part.tokens.end());
      global.targets.insert(global.targets.end(), part.targets.begin(), part.targets.end());
    }
  }
  return global;
}

}  // namespace shardplan::runner
