// Ring attention (ring_attention.h) on cp ranks in one process — a thread per rank, joined by an in-memory ring —
// equals causal attention over the whole sequence computed here in double: the output and the gradients of q, k and
// v, for cp 2, 3 and 4 (cp 2 alone cannot tell the ring's direction: rank − 1 and rank + 1 are the same rank), and
// each rank posts the ring steps Note [Ring attention] counts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "errors.h"
#include "ring_attention.h"

namespace shardplan::runtime {
namespace {

// One mailbox per (receiving rank, channel); each has one sender, the rank before, so its order is the order sent.
class ThreadRing {
 public:
  void post(int to, int channel, std::vector<float> message) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      boxes_[{to, channel}].push_back(std::move(message));
    }
    arrived_.notify_all();
  }
  std::vector<float> take(int at, int channel) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& box = boxes_[{at, channel}];
    arrived_.wait(lock, [&box] { return !box.empty(); });
    std::vector<float> message = std::move(box.front());
    box.pop_front();
    return message;
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::pair<int, int>, std::deque<std::vector<float>>> boxes_;
};

class ThreadRank final : public ContextParallelGroup {
 public:
  ThreadRank(ThreadRing& ring, int degree, int rank) : ring_(&ring), degree_(degree), rank_(rank) {}
  int degree() const override { return degree_; }
  int rank() const override { return rank_; }
  int start_ring_step(std::span<const float> send, std::span<float> recv, Channel channel) override {
    ring_->post((rank_ + 1) % degree_, static_cast<int>(channel), std::vector<float>(send.begin(), send.end()));
    ++posted[static_cast<std::size_t>(channel)];
    pending_[next_id_] = {recv, static_cast<int>(channel)};
    return next_id_++;
  }
  void wait_ring_step(int id) override {
    const auto [recv, channel] = pending_.at(id);
    const std::vector<float> message = ring_->take(rank_, channel);
    size_mismatch = size_mismatch || message.size() != recv.size();
    std::copy_n(message.begin(), std::min(message.size(), recv.size()), recv.begin());
    pending_.erase(id);
  }
  int posted[2] = {0, 0};  // per Channel
  bool size_mismatch = false;

 private:
  ThreadRing* ring_;
  int degree_, rank_;
  std::map<int, std::pair<std::span<float>, int>> pending_;
  int next_id_ = 0;
};

constexpr int kBatch = 2, kSeq = 24;  // 24: a multiple of 2·cp for cp 2, 3 and 4

DecoderDims ring_dims() {
  DecoderDims dims;
  dims.num_heads = 4;
  dims.num_kv_heads = 2;  // grouped-query: each kv head serves two query heads
  dims.head_dim = 4;
  return dims;
}

// Causal attention over whole sequences in double: out, and dq, dk, dv for d_out (the textbook backward:
// dV = Pᵀ·dO, dS = P ⊙ (dO·Vᵀ − rowsum(P ⊙ dO·Vᵀ)), dQ = dS·K/√d, dK = dSᵀ·Q/√d).
struct WholeAttention {
  std::vector<double> out, dq, dk, dv;
};
WholeAttention whole_attention(const DecoderDims& dims, const std::vector<float>& q, const std::vector<float>& k,
                               const std::vector<float>& v, const std::vector<float>& d_out) {
  const std::int64_t d = dims.head_dim, qd = dims.q_dim(), kvd = dims.kv_dim();
  const std::int64_t group = dims.num_heads / dims.num_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  WholeAttention r{std::vector<double>(q.size()), std::vector<double>(q.size()), std::vector<double>(k.size()),
                   std::vector<double>(v.size())};
  for (std::int64_t b = 0; b < kBatch; ++b) {
    for (std::int64_t head = 0; head < dims.num_heads; ++head) {
      const auto qi = [&](std::int64_t i, std::int64_t e) { return (b * kSeq + i) * qd + head * d + e; };
      const auto ki = [&](std::int64_t j, std::int64_t e) { return (b * kSeq + j) * kvd + (head / group) * d + e; };
      for (std::int64_t i = 0; i < kSeq; ++i) {
        std::vector<double> p(static_cast<std::size_t>(i + 1)), dp(p.size());
        double high = -INFINITY, sum = 0, delta = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < d; ++e) s += static_cast<double>(q[qi(i, e)]) * k[ki(j, e)];
          p[j] = s * scale;
          high = std::max(high, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - high));
        for (std::int64_t j = 0; j <= i; ++j) {
          p[j] /= sum;
          for (std::int64_t e = 0; e < d; ++e) {
            r.out[qi(i, e)] += p[j] * v[ki(j, e)];
            r.dv[ki(j, e)] += p[j] * d_out[qi(i, e)];
            dp[j] += static_cast<double>(d_out[qi(i, e)]) * v[ki(j, e)];
          }
          delta += p[j] * dp[j];
        }
        for (std::int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - delta) * scale;
          for (std::int64_t e = 0; e < d; ++e) {
            r.dq[qi(i, e)] += ds * k[ki(j, e)];
            r.dk[ki(j, e)] += ds * q[qi(i, e)];
          }
        }
      }
    }
  }
  return r;
}

// Rows `positions` of each sequence of a [kBatch·kSeq × width] buffer, and the way back.
std::vector<float> rows_of(const std::vector<float>& whole, std::int64_t width, const std::vector<std::int64_t>& at) {
  std::vector<float> part;
  for (std::int64_t b = 0; b < kBatch; ++b) {
    for (const std::int64_t p : at) {
      const auto from = whole.begin() + (b * kSeq + p) * width;
      part.insert(part.end(), from, from + width);
    }
  }
  return part;
}
void put_rows(const std::vector<float>& part, std::int64_t width, const std::vector<std::int64_t>& at,
              std::vector<float>& whole) {
  const auto local = static_cast<std::int64_t>(at.size());
  for (std::int64_t b = 0; b < kBatch; ++b) {
    for (std::int64_t i = 0; i < local; ++i) {
      std::copy_n(part.begin() + (b * local + i) * width, width, whole.begin() + (b * kSeq + at[i]) * width);
    }
  }
}

// max |a − b| / max |b|.
double relative_error(const std::vector<float>& a, const std::vector<double>& b) {
  double difference = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference = std::max(difference, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return difference / scale;
}

void check_ring(int cp) {
  const DecoderDims dims = ring_dims();
  const std::int64_t qd = dims.q_dim(), kvd = dims.kv_dim();
  std::mt19937 generator(20 + cp);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto random = [&](std::int64_t count) {
    std::vector<float> x(static_cast<std::size_t>(count));
    for (float& value : x) value = normal(generator);
    return x;
  };
  const std::vector<float> q = random(kBatch * kSeq * qd), k = random(kBatch * kSeq * kvd),
                           v = random(kBatch * kSeq * kvd), d_out = random(kBatch * kSeq * qd);
  const WholeAttention expected = whole_attention(dims, q, k, v, d_out);

  ThreadRing ring;
  std::vector<ThreadRank> ranks;
  for (int r = 0; r < cp; ++r) ranks.emplace_back(ring, cp, r);
  std::vector<float> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  std::mutex results;
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<std::int64_t> at = load_balanced_positions(kSeq, cp, r);
      const AttentionShape shape{kBatch, kSeq / cp};
      const std::vector<float> q_r = rows_of(q, qd, at), k_r = rows_of(k, kvd, at), v_r = rows_of(v, kvd, at);
      std::vector<float> out_r(q_r.size()), lse(static_cast<std::size_t>(kBatch * dims.num_heads * (kSeq / cp)));
      ring_attention_forward(dims, shape, ranks[static_cast<std::size_t>(r)], q_r.data(), k_r.data(), v_r.data(),
                             out_r.data(), lse.data());
      std::vector<float> dq_r(q_r.size()), dk_r(k_r.size()), dv_r(v_r.size());
      const std::vector<float> d_out_r = rows_of(d_out, qd, at);
      ring_attention_backward(dims, shape, ranks[static_cast<std::size_t>(r)], q_r.data(), k_r.data(), v_r.data(),
                              out_r.data(), lse.data(), d_out_r.data(), dq_r.data(), dk_r.data(), dv_r.data());
      const std::lock_guard<std::mutex> lock(results);
      put_rows(out_r, qd, at, out);
      put_rows(dq_r, qd, at, dq);
      put_rows(dk_r, kvd, at, dk);
      put_rows(dv_r, kvd, at, dv);
    });
  }
  for (std::thread& thread : threads) thread.join();
  INFO("cp ", cp);
  CHECK(relative_error(out, expected.out) < 1e-5);
  CHECK(relative_error(dq, expected.dq) < 1e-5);
  CHECK(relative_error(dk, expected.dk) < 1e-5);
  CHECK(relative_error(dv, expected.dv) < 1e-5);
  for (const ThreadRank& rank : ranks) {
    CHECK_FALSE(rank.size_mismatch);
    CHECK(rank.posted[0] == 2 * (cp - 1));  // K/V: cp − 1 steps forward, cp − 1 backward
    CHECK(rank.posted[1] == cp);            // dK/dV: cp steps backward
  }
}

TEST_CASE("ring attention over cp 2, 3 and 4 ranks equals whole-sequence causal attention") {
  for (int cp : {2, 3, 4}) check_ring(cp);
}

TEST_CASE("load-balanced positions: rank r holds chunks r and 2cp - 1 - r") {
  CHECK(load_balanced_positions(12, 3, 0) == std::vector<std::int64_t>{0, 1, 10, 11});
  CHECK(load_balanced_positions(12, 3, 1) == std::vector<std::int64_t>{2, 3, 8, 9});
  CHECK(load_balanced_positions(12, 3, 2) == std::vector<std::int64_t>{4, 5, 6, 7});
  CHECK_THROWS_AS(load_balanced_positions(10, 3, 0), InputError);
}

}  // namespace
}  // namespace shardplan::runtime
