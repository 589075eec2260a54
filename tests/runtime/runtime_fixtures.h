// Shared fixtures of the runtime tests: a tiny llama architecture, deterministic random buffers and batches.
#pragma once

#include <cstdint>
#include <vector>

#include "counter_rng.h"
#include "decoder_builder.h"
#include "runtime_types.h"

namespace shardplan::runtime::testing {

// Small enough that finite differences over many elements stay fast, big enough to exercise grouped-query heads
// (4 query heads over 2 kv heads, head_dim 4), several sequences and several positions.
inline DecoderArchitecture tiny_architecture() {
  DecoderArchitecture arch;
  arch.family = DecoderArchitecture::Family::llama;
  arch.vocab_size = 32;
  arch.hidden_size = 16;
  arch.intermediate_size = 24;
  arch.num_layers = 2;
  arch.num_heads = 4;
  arch.num_kv_heads = 2;
  arch.max_position_embeddings = 64;
  return arch;
}

inline ModelSpec tiny_model(bool tied = false, bool attention_bias = false) {
  DecoderArchitecture arch = tiny_architecture();
  arch.tie_word_embeddings = tied;
  arch.attention_bias = attention_bias;
  return build_decoder("tiny-test", arch, "test");
}

// Uniform in [lo, hi) from the counter stream (seed, index): test data that is identical on every platform.
inline float uniform_at(std::uint64_t seed, std::uint64_t index, float lo, float hi) {
  const double unit = static_cast<double>(splitmix64(seed, index) >> 11) / 9007199254740992.0;
  return static_cast<float>(lo + (hi - lo) * unit);
}

inline std::vector<float> uniform_buffer(std::size_t count, std::uint64_t seed, float lo, float hi) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = uniform_at(seed, i, lo, hi);
  return values;
}

inline Batch random_batch(int micro_batch, int seq_len, std::int64_t vocab, std::uint64_t seed) {
  Batch batch{micro_batch, seq_len, {}, {}};
  for (std::int64_t i = 0; i < batch.token_count(); ++i) {
    batch.tokens.push_back(static_cast<std::int32_t>(splitmix64(seed, 2 * i) % static_cast<std::uint64_t>(vocab)));
    batch.targets.push_back(static_cast<std::int32_t>(splitmix64(seed, 2 * i + 1) % static_cast<std::uint64_t>(vocab)));
  }
  batch.tokens[3] = batch.tokens[0];  // a repeated token: the embedding backward must sum both rows
  return batch;
}

// `count` distinct-ish indices in [0, size), all of them when size <= count.
inline std::vector<std::size_t> sample_indices(std::size_t size, std::size_t count, std::uint64_t seed) {
  std::vector<std::size_t> picked;
  if (size <= count) {
    for (std::size_t i = 0; i < size; ++i) picked.push_back(i);
    return picked;
  }
  for (std::size_t i = 0; i < count; ++i) picked.push_back(static_cast<std::size_t>(splitmix64(seed, i) % size));
  return picked;
}

}  // namespace shardplan::runtime::testing
