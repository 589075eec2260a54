// ByteTextDataset: reads a text file and cuts deterministic, seekable next-token windows out of it.
#include "byte_text_dataset.h"

#include <fstream>
#include <iterator>

#include "counter_rng.h"
#include "errors.h"

namespace shardplan::runtime {

ByteTextDataset::ByteTextDataset(const ByteTextDatasetOptions& options) : options_(options) {
  if (options.micro_batch < 1 || options.seq_len < 1) {
    throw InputError("dataset: expected positive micro_batch and seq_len, got " +
                     std::to_string(options.micro_batch) + " and " + std::to_string(options.seq_len));
  }
  std::ifstream file(options.path, std::ios::binary);
  if (!file) throw InputError("dataset '" + options.path + "': cannot open the file");
  bytes_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  if (file.bad()) throw InputError("dataset '" + options.path + "': read error");
  if (bytes_.size() < static_cast<std::size_t>(options.seq_len) + 1) {
    throw InputError("dataset '" + options.path + "': " + std::to_string(bytes_.size()) + " bytes, expected at least " +
                     "seq_len + 1 = " + std::to_string(options.seq_len + 1));
  }
}

Batch ByteTextDataset::batch_at(std::uint64_t index) const {
  const auto window = static_cast<std::size_t>(options_.seq_len) + 1;
  const std::uint64_t starts = bytes_.size() - window + 1;  // every window fits the file
  Batch batch;
  batch.micro_batch = options_.micro_batch;
  batch.seq_len = options_.seq_len;
  batch.tokens.reserve(static_cast<std::size_t>(batch.token_count()));
  batch.targets.reserve(batch.tokens.capacity());
  for (int row = 0; row < options_.micro_batch; ++row) {
    const std::uint64_t draw = splitmix64(options_.seed, index * static_cast<std::uint64_t>(options_.micro_batch) +
                                                             static_cast<std::uint64_t>(row));
    // The modulo bias is below starts/2^64 (≈1e-15 here): irrelevant for sampling text windows.
    const auto start = static_cast<std::size_t>(draw % starts);
    for (int s = 0; s < options_.seq_len; ++s) {
      batch.tokens.push_back(bytes_[start + static_cast<std::size_t>(s)]);
      batch.targets.push_back(bytes_[start + static_cast<std::size_t>(s) + 1]);
    }
  }
  return batch;
}

}  // namespace shardplan::runtime
