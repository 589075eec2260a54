// ByteTextDataset: reads a text file and cuts deterministic, seekable next-token windows out of it.
#include "byte_text_dataset.h"


#include "counter_rng.h"
#include "errors.h"
#include "input_limits.h"
#include "json_input.h"

namespace shardplan::runtime {

ByteTextDataset::ByteTextDataset(const ByteTextDatasetOptions& options) : options_(options) {
  if (options.micro_batch < 1 || options.seq_len < 1) {
    throw InputError("dataset: expected positive micro_batch and seq_len, got " +
                     std::to_string(options.micro_batch) + " and " + std::to_string(options.seq_len));
  }
  // Note [Input files] (costmodel/input_limits.h): a regular file of at most kMaxDatasetFileBytes, checked before
  // reading (/dev/zero grew every rank to gigabytes).
  try {
    const std::string text = read_text_file(options.path, limits::kMaxDatasetFileBytes);
    bytes_.assign(text.begin(), text.end());
  } catch (const InputError& error) {
    throw InputError(std::string("dataset: ") + error.what());
  }
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
