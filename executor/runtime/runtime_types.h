// Value types the CPU model runtime passes between layers: Batch (token ids), Activations (hidden states), Eigen views.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <vector>

namespace shardplan::runtime {

// Called between the large parts of a layer pass so an executor can drive in-flight collectives (Note [Progress hook]
// in layer_kernel.h). May be empty.
using ProgressPoll = std::function<void()>;
inline void poll(const ProgressPoll& progress) {
  if (progress) progress();
}

// One micro-batch of next-token prediction: targets[i] is the token that follows tokens[i] in the text.
struct Batch {
  int micro_batch = 0;
  int seq_len = 0;
  std::vector<std::int32_t> tokens;   // [micro_batch × seq_len], row-major
  std::vector<std::int32_t> targets;  // [micro_batch × seq_len], row-major
  // On a TP rank (Note [Sequence-parallel tokens] in tensor_parallel_group.h): micro_batch × seq_len is this rank's
  // share of the group's micro-batch, while tokens and targets hold the whole micro-batch, group_degree times as
  // many ids, which the vocabulary-parallel embedding and loss read. 1 otherwise.
  int group_degree = 1;
  std::int64_t token_count() const { return static_cast<std::int64_t>(micro_batch) * seq_len; }
};

// A layer's input or output: `width` features for each of micro_batch × seq_len tokens, row-major, fp32.
// The loss layer's output is a scalar: micro_batch = seq_len = width = 1, holding the mean loss.
struct Activations {
  int micro_batch = 0;
  int seq_len = 0;
  std::int64_t width = 0;
  std::vector<float> values;

  std::int64_t token_count() const { return static_cast<std::int64_t>(micro_batch) * seq_len; }
  std::int64_t bytes() const { return static_cast<std::int64_t>(values.size() * sizeof(float)); }
  static Activations zeros(int micro_batch, int seq_len, std::int64_t width) {
    return {micro_batch, seq_len, width,
            std::vector<float>(static_cast<std::size_t>(static_cast<std::int64_t>(micro_batch) * seq_len * width))};
  }
  static Activations scalar(float value) { return {1, 1, 1, {value}}; }
};

// Row-major matrices over flat float buffers: parameters follow the Hugging Face [out_features, in_features]
// layout and activations are [tokens, features], so every GEMM below is y = x·Wᵀ on row-major maps.
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<RowMatrix>;
using ConstMatrixView = Eigen::Map<const RowMatrix>;
// One head's columns inside a [tokens, heads·head_dim] matrix: rows are `stride` floats apart.
using StridedView = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
using ConstStridedView = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using VectorView = Eigen::Map<Eigen::VectorXf>;
using ConstVectorView = Eigen::Map<const Eigen::VectorXf>;

}  // namespace shardplan::runtime
