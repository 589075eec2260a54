// Rotary position embedding: the cos/sin table and the in-place rotation (and its inverse for backward).
#include "rope.h"

#include <cmath>

#include "errors.h"
#include "runtime_types.h"

namespace shardplan::runtime {

RopeTable rope_table(std::int64_t seq_len, std::int64_t head_dim, double theta) {
  SHARDPLAN_CHECK(head_dim % 2 == 0 && seq_len > 0, "RoPE needs an even head_dim and a positive seq_len");
  RopeTable table;
  table.seq_len = seq_len;
  table.half_dim = head_dim / 2;
  table.cos.resize(static_cast<std::size_t>(seq_len * table.half_dim));
  table.sin.resize(table.cos.size());
  for (std::int64_t p = 0; p < seq_len; ++p) {
    for (std::int64_t i = 0; i < table.half_dim; ++i) {
      const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(p) * inv_freq;
      const auto at = static_cast<std::size_t>(p * table.half_dim + i);
      table.cos[at] = static_cast<float>(std::cos(angle));
      table.sin[at] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

namespace {

// Rotates token t of x by the angles of position_of(t).
template <typename PositionOf>
void rotate(const RopeTable& table, float* x, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
            bool inverse, PositionOf position_of) {
  SHARDPLAN_CHECK(head_dim == 2 * table.half_dim, "RoPE table built for another head_dim");
  const std::int64_t half = table.half_dim;
  const float sign = inverse ? -1.0f : 1.0f;
  Eigen::ArrayXf first(half);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t position = position_of(t);
    SHARDPLAN_CHECK(position >= 0 && position < table.seq_len, "RoPE position outside the table");
    const auto c = Eigen::Map<const Eigen::ArrayXf>(table.cos.data() + position * half, half);
    const Eigen::ArrayXf s = sign * Eigen::Map<const Eigen::ArrayXf>(table.sin.data() + position * half, half);
    for (std::int64_t h = 0; h < heads; ++h) {
      float* head = x + (t * heads + h) * head_dim;
      Eigen::Map<Eigen::ArrayXf> x1(head, half), x2(head + half, half);
      first = x1;
      x1 = x1 * c - x2 * s;
      x2 = x2 * c + first * s;
    }
  }
}

}  // namespace

void rope_rotate(const RopeTable& table, float* x, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                 bool inverse) {
  rotate(table, x, tokens, heads, head_dim, inverse, [&table](std::int64_t t) { return t % table.seq_len; });
}

void rope_rotate_at(const RopeTable& table, float* x, std::int64_t tokens, std::span<const std::int64_t> positions,
                    std::int64_t heads, std::int64_t head_dim, bool inverse) {
  SHARDPLAN_CHECK(!positions.empty(), "RoPE positions: none given");
  const auto count = static_cast<std::int64_t>(positions.size());
  rotate(table, x, tokens, heads, head_dim, inverse,
         [&](std::int64_t t) { return positions[static_cast<std::size_t>(t % count)]; });
}

}  // namespace shardplan::runtime
