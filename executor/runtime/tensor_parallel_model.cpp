// Tensor parallelism's split of a llama model: the rank model's shapes and the whole ↔ rank copies (Note
// [Tensor-parallel split]).
#include "tensor_parallel_model.h"

#include <algorithm>
#include <string>

#include "errors.h"
#include "tensor_parallel.h"

namespace shardplan::runtime {

ModelSpec tensor_parallel_rank_model(const ModelSpec& model, int degree) {
  (void)tensor_parallel_dims(decoder_dims(model), degree);  // InputError for a model the CPU kernels cannot run
  return tensor_parallel_shard(model, pytorch_tensor_parallel(degree));
}

DecoderDims tensor_parallel_dims(const DecoderDims& whole, int degree) {
  if (degree < 1 || whole.num_kv_heads % degree != 0 || whole.num_heads % degree != 0 ||
      whole.intermediate_size % degree != 0 || whole.vocab_size % degree != 0) {
    throw InputError("tensor_parallel_degree " + std::to_string(degree) + ": expected a degree dividing the kv heads (" +
                     std::to_string(whole.num_kv_heads) + "), the heads (" + std::to_string(whole.num_heads) +
                     "), intermediate_size (" + std::to_string(whole.intermediate_size) + ") and vocab_size (" +
                     std::to_string(whole.vocab_size) + ")");
  }
  DecoderDims dims = whole;
  dims.num_heads /= degree;
  dims.num_kv_heads /= degree;
  dims.intermediate_size /= degree;
  dims.vocab_size /= degree;
  return dims;
}

namespace {

// Calls copy(whole_offset, rank_offset, count) for every contiguous run of elements rank `rank` holds.
template <typename Copy>
void for_each_rank_run(const ModelLayout& whole, const ModelLayout& rank_layout, int degree, int rank, Copy copy) {
  SHARDPLAN_CHECK(whole.layers.size() == rank_layout.layers.size(), "TP rank layout of another model");
  for (std::size_t layer = 0; layer < whole.layers.size(); ++layer) {
    const LayerLayout& w = whole.layers[layer];
    const LayerLayout& r = rank_layout.layers[layer];
    SHARDPLAN_CHECK(w.tensors.size() == r.tensors.size(), "TP rank layer of another layer");
    for (std::size_t t = 0; t < w.tensors.size(); ++t) {
      const TensorSlot& wt = w.tensors[t];
      const TensorSlot& rt = r.tensors[t];
      const std::int64_t w_base = whole.layer_offsets_elements[layer] + wt.offset_elements;
      const std::int64_t r_base = rank_layout.layer_offsets_elements[layer] + rt.offset_elements;
      if (wt.shape == rt.shape) {  // replicated
        copy(w_base, r_base, rt.element_count);
      } else if (wt.shape.at(0) != rt.shape.at(0)) {  // rows: one contiguous block
        SHARDPLAN_CHECK(wt.shape.at(0) == rt.shape.at(0) * degree, "TP rows of '" + wt.name + "'");
        copy(w_base + rank * rt.element_count, r_base, rt.element_count);
      } else {  // columns: one run per row
        const std::int64_t rows = rt.shape.at(0), columns = rt.shape.at(1);
        SHARDPLAN_CHECK(wt.shape.at(1) == columns * degree, "TP columns of '" + wt.name + "'");
        for (std::int64_t row = 0; row < rows; ++row) {
          copy(w_base + row * wt.shape.at(1) + rank * columns, r_base + row * columns, columns);
        }
      }
    }
  }
}

}  // namespace

void extract_tensor_parallel_rank(const ModelLayout& whole, const ModelLayout& rank_layout, int degree, int rank,
                                  std::span<const float> whole_flat, std::span<float> rank_flat) {
  SHARDPLAN_CHECK(static_cast<std::int64_t>(whole_flat.size()) == whole.element_count &&
                      static_cast<std::int64_t>(rank_flat.size()) == rank_layout.element_count,
                  "extract_tensor_parallel_rank: buffer sizes");
  for_each_rank_run(whole, rank_layout, degree, rank, [&](std::int64_t w, std::int64_t r, std::int64_t n) {
    std::copy_n(whole_flat.begin() + w, n, rank_flat.begin() + r);
  });
}

void insert_tensor_parallel_rank(const ModelLayout& whole, const ModelLayout& rank_layout, int degree, int rank,
                                 std::span<const float> rank_flat, std::span<float> whole_flat) {
  SHARDPLAN_CHECK(static_cast<std::int64_t>(whole_flat.size()) == whole.element_count &&
                      static_cast<std::int64_t>(rank_flat.size()) == rank_layout.element_count,
                  "insert_tensor_parallel_rank: buffer sizes");
  for_each_rank_run(whole, rank_layout, degree, rank, [&](std::int64_t w, std::int64_t r, std::int64_t n) {
    std::copy_n(rank_flat.begin() + r, n, whole_flat.begin() + w);
  });
}

}  // namespace shardplan::runtime
