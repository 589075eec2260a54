// ByteTextDataset: next-token training batches from a real text file, one byte per token (vocabulary 0..255).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime_types.h"

namespace shardplan::runtime {

struct ByteTextDatasetOptions {
  // Present on every Debian/Ubuntu system (base-files), ~35 KB of English text: real data without a download.
  std::string path = "/usr/share/common-licenses/GPL-3";
  std::uint64_t seed = 0;
  int micro_batch = 1;
  int seq_len = 64;
};

// Batch i of a given (file, seed, micro_batch, seq_len) is a pure function of i: row r is the window of seq_len + 1
// bytes starting at a position drawn from SplitMix64 output (i·micro_batch + r) of the seed; tokens are the first
// seq_len bytes, targets the same window shifted by one. The dataset's state is just the index of the next batch, so
// a checkpoint stores position() and a resumed run seek()s to it and continues with the identical stream. Data-parallel
// ranks either share one stream (rank r takes batch_at(step·world + r)) or use different seeds.
class ByteTextDataset {
 public:
  // Reads the whole file; InputError naming it when it cannot be read or is shorter than seq_len + 1 bytes.
  explicit ByteTextDataset(const ByteTextDatasetOptions& options);

  Batch batch_at(std::uint64_t index) const;
  Batch next() { return batch_at(position_++); }
  std::uint64_t position() const { return position_; }
  void seek(std::uint64_t position) { position_ = position; }

  std::size_t size_bytes() const { return bytes_.size(); }
  const ByteTextDatasetOptions& options() const { return options_; }
  static constexpr int vocab_size = 256;

 private:
  ByteTextDatasetOptions options_;
  std::vector<std::uint8_t> bytes_;
  std::uint64_t position_ = 0;
};

}  // namespace shardplan::runtime
