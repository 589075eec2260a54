// Rotary position embedding (Su et al. 2021, "RoFormer"), in the rotate-half convention of HF Llama.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace shardplan::runtime {

// cos/sin of angle(p, i) = p · theta^(−2i/head_dim) for positions p < seq_len and pairs i < head_dim/2, row-major
// [seq_len × head_dim/2]. Computed in double and rounded once, so the table does not depend on fp32 pow/cos quirks.
struct RopeTable {
  std::int64_t seq_len = 0;
  std::int64_t half_dim = 0;
  std::vector<float> cos;
  std::vector<float> sin;
};
RopeTable rope_table(std::int64_t seq_len, std::int64_t head_dim, double theta);

// Rotates every head of x [tokens × heads·head_dim] in place, token t at position t mod seq_len (tokens are
// micro_batch sequences back to back). HF apply_rotary_pos_emb: x·cos + rotate_half(x)·sin with
// rotate_half(x) = [−x₂, x₁], i.e. pair (x₁[i], x₂[i]) = (x[i], x[i + head_dim/2]) turns by angle(p, i).
// inverse turns by −angle: the transpose of the rotation, which is its backward.
void rope_rotate(const RopeTable& table, float* x, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                 bool inverse);
// The same with token t at position positions[t mod positions.size()] (< table.seq_len): a context-parallel rank's
// tokens, which are not a prefix of their sequence (Note [Context-parallel runner] in
// executor/runner/context_parallel_runner.h).
void rope_rotate_at(const RopeTable& table, float* x, std::int64_t tokens, std::span<const std::int64_t> positions,
                    std::int64_t heads, std::int64_t head_dim, bool inverse);

}  // namespace shardplan::runtime
