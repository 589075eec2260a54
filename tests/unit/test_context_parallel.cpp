// Tests of the context-parallel (ring attention) cost model: K/V bytes per ring step by hand for Llama 3 8B, cp = 1,
// load-balanced against contiguous causal sharding, and the communication the attention compute hides.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "cluster.h"
#include "context_parallel.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"

using namespace shardplan;

namespace {

// Llama 3 8B's attention (meta-llama/Meta-Llama-3-8B config.json: 32 heads, 8 key/value heads, hidden 4096 → head
// dim 128), one 32k-token sequence in bf16.
AttentionShape llama3_8b_attention(std::int64_t seq_len) {
  AttentionShape shape;
  shape.batch = 1;
  shape.seq_len = seq_len;
  shape.heads = 32;
  shape.kv_heads = 8;
  shape.head_dim = 128;
  shape.element_bytes = 2;
  shape.causal = true;
  return shape;
}

ContextParallelOptions cp_options(int degree, bool load_balance = true,
                                  KvRotateMethod rotate = KvRotateMethod::alltoall) {
  ContextParallelOptions options;
  options.degree = degree;
  options.load_balance = load_balance;
  options.rotate_method = rotate;
  return options;
}

double mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

LinkTier nvlink(double bus_bytes_per_s) { return LinkTier{"nvlink4", 2e-6, bus_bytes_per_s, 0.8}; }

}  // namespace

TEST_CASE("context parallel: Llama 3 8B at 32k on cp 4 sends its K/V bytes, computed by hand") {
  const auto result = context_parallel_attention(llama3_8b_attention(32768), cp_options(4));
  CHECK(result.tokens_per_rank == 8192);
  // K and V: 2 × b 1 × 8192 tokens × 8 kv heads × 128 × 2 bytes = 33,554,432 (32 MiB) per ring step.
  CHECK(result.kv_bytes_per_ring_step == 33'554'432);
  // dK and dV travel in fp32 (torch's convert_to_f32): 64 MiB per step.
  CHECK(result.grad_kv_bytes_per_ring_step == 67'108'864);
  CHECK(result.forward_kv_ring_steps == 3);
  CHECK(result.backward_kv_ring_steps == 3);
  CHECK(result.backward_grad_kv_ring_steps == 4);
  CHECK(result.forward_bytes_sent_per_layer == 3 * 33'554'432LL);                 // 96 MiB
  CHECK(result.backward_bytes_sent_per_layer == 3 * 33'554'432LL + 4 * 67'108'864LL);  // 352 MiB
  // Q (32 heads) + K + V (8 heads each) of 8192 tokens: 8192 × 48 × 128 × 2 bytes.
  CHECK(result.attention_input_bytes_per_rank == 8192LL * 48 * 128 * 2);
  CHECK(result.kv_receive_buffer_bytes == 33'554'432);
  // Causal forward FLOPs of the whole sequence, 2·b·s²·heads·head_dim (half of 4·b·s²·h), split four ways.
  const double total = 2.0 * 32768.0 * 32768.0 * 32 * 128;
  CHECK(std::accumulate(result.forward_flops_per_rank.begin(), result.forward_flops_per_rank.end(), 0.0) ==
        doctest::Approx(total));
  CHECK(result.forward_flops_per_ring_step == doctest::Approx(total / 4 / 4));

  // allgather moves the same bytes but holds every rank's K/V at once.
  const auto gathered = context_parallel_attention(llama3_8b_attention(32768),
                                                   cp_options(4, true, KvRotateMethod::allgather));
  CHECK(gathered.forward_bytes_sent_per_layer == result.forward_bytes_sent_per_layer);
  CHECK(gathered.kv_receive_buffer_bytes == 4 * 33'554'432LL);
}

TEST_CASE("context parallel: cp 1 communicates nothing and computes the whole causal attention") {
  const auto result = context_parallel_attention(llama3_8b_attention(8192), cp_options(1));
  CHECK_FALSE(result.load_balanced);
  CHECK(result.tokens_per_rank == 8192);
  CHECK(result.forward_kv_ring_steps == 0);
  CHECK(result.backward_grad_kv_ring_steps == 0);
  CHECK(result.forward_bytes_sent_per_layer == 0);
  CHECK(result.backward_bytes_sent_per_layer == 0);
  CHECK(result.kv_receive_buffer_bytes == 0);
  REQUIRE(result.forward_flops_per_rank.size() == 1);
  CHECK(result.forward_flops_per_rank[0] == doctest::Approx(2.0 * 8192.0 * 8192.0 * 32 * 128));
  const auto exposure = ring_exposure(result, 1e-3, 2e-3, nvlink(450e9));
  CHECK(exposure.forward_exposed_s == 0);
  CHECK(exposure.backward_exposed_s == 0);
  CHECK(exposure.forward_comm_s == 0);
  CHECK(result.forward_tensor_bytes == 0);  // no ring, no merges (Note [Ring tensor traffic])
  CHECK(result.backward_tensor_bytes == 0);
}

TEST_CASE("context parallel: the ring's eager tensor ops move the bytes counted by hand") {
  // Note [Ring tensor traffic] on one sequence of 8 tokens, 2 heads (and K/V heads) of 4, bf16, cp 2: each rank holds
  // 4 tokens, so N = N_kv = 4 × 2 × 4 = 32 elements; e = 2, f = 4.
  AttentionShape shape;
  shape.seq_len = 8;
  shape.heads = 2;
  shape.kv_heads = 2;
  shape.head_dim = 4;
  const auto ring = context_parallel_attention(shape, cp_options(2));
  // Forward: contiguous K, V 4·2·32 = 256; one K/V cat 256; two out.to(fp32) 2·6·32 = 384; one merge 8·4·32 = 1024;
  // the result's conversion 6·32 = 192.
  CHECK(ring.forward_tensor_bytes == 256 + 256 + 384 + 1024 + 192);
  CHECK(ring.forward_tensor_kernels == 2 + 1 + 2 + 3 + 1);
  // Backward: fp32 zeros 4·(32 + 64) = 384; contiguous 256; one K/V cat 256; step 0's dK, dV sums 2·10·32 = 640; one
  // later step's partial updates 2·(10·32/2 + 8·32) = 832; two steps' dK/dV cats and dQ sums 2·(16·32 + 10·32) =
  // 1664; the conversions 6·(32 + 64) = 576.
  CHECK(ring.backward_tensor_bytes == 384 + 256 + 256 + 640 + 832 + 1664 + 576);
  CHECK(ring.backward_tensor_kernels == 3 + 2 + 1 + 2 + 4 + 4 + 3);
}

TEST_CASE("context parallel: balanced causal sharding evens the FLOPs, the contiguous split loads the last rank") {
  for (int cp : {2, 3, 4, 8}) {
    CAPTURE(cp);
    const auto result = context_parallel_attention(llama3_8b_attention(2 * 3 * 4 * 8 * 512), cp_options(cp));
    CHECK(result.load_balanced);
    const auto& balanced = result.forward_flops_per_rank_balanced;
    const auto& contiguous = result.forward_flops_per_rank_contiguous;
    REQUIRE(balanced.size() == static_cast<std::size_t>(cp));
    for (double flops : balanced) CHECK(flops == doctest::Approx(balanced.front()));
    CHECK(result.max_over_mean_flops == doctest::Approx(1.0));
    // The same work in total, divided differently.
    CHECK(mean(balanced) == doctest::Approx(mean(contiguous)));
    // Contiguous: rank r does r + ½ blocks, the mean cp/2, the last (2cp − 1)/cp × the mean.
    CHECK(contiguous.back() / mean(contiguous) == doctest::Approx((2.0 * cp - 1) / cp));
    CHECK(contiguous.front() / mean(contiguous) == doctest::Approx(1.0 / cp));
    const auto plain = context_parallel_attention(llama3_8b_attention(2 * 3 * 4 * 8 * 512), cp_options(cp, false));
    CHECK_FALSE(plain.load_balanced);
    CHECK(plain.max_over_mean_flops == doctest::Approx((2.0 * cp - 1) / cp));
  }
  // Without a causal mask both splits are even, and torch runs no balancer.
  auto full = llama3_8b_attention(4096);
  full.causal = false;
  const auto result = context_parallel_attention(full, cp_options(4));
  CHECK_FALSE(result.load_balanced);
  CHECK(result.max_over_mean_flops == doctest::Approx(1.0));
  CHECK(result.forward_flops_per_rank[0] == doctest::Approx(4.0 * 1024 * 4096 * 32 * 128));
}

TEST_CASE("context parallel: a ring step's send hides behind the step's attention when the compute dominates") {
  const auto result = context_parallel_attention(llama3_8b_attention(32768), cp_options(4));
  const LinkTier link = nvlink(450e9);
  const double kv_send_s = 2e-6 + 33'554'432.0 / (450e9 * 0.8);
  const double grad_send_s = 2e-6 + 67'108'864.0 / (450e9 * 0.8);

  // Compute far longer than any window's sends: the forward hides everything, the backward all but the last dK/dV.
  const auto hidden = ring_exposure(result, 10e-3, 20e-3, link);
  CHECK(hidden.kv_send_s == doctest::Approx(kv_send_s));
  CHECK(hidden.forward_comm_s == doctest::Approx(3 * kv_send_s));
  CHECK(hidden.forward_exposed_s == 0);
  CHECK(hidden.backward_comm_s == doctest::Approx(3 * kv_send_s + 4 * grad_send_s));
  CHECK(hidden.backward_exposed_s == doctest::Approx(grad_send_s));

  // No compute to hide behind: everything is exposed.
  const auto bare = ring_exposure(result, 0, 0, link);
  CHECK(bare.forward_exposed_s == doctest::Approx(bare.forward_comm_s));
  CHECK(bare.backward_exposed_s == doctest::Approx(bare.backward_comm_s));

  // In between, each window exposes what its sends take beyond the step: forward 3 × (send − compute).
  const double step_s = kv_send_s / 2;
  const auto partial = ring_exposure(result, step_s, 0, link);
  CHECK(partial.forward_exposed_s == doctest::Approx(3 * (kv_send_s - step_s)));

  // allgather: one all-gather of 3 ranks' K/V, hidden only by step 0.
  const auto gathered = context_parallel_attention(llama3_8b_attention(32768),
                                                   cp_options(4, true, KvRotateMethod::allgather));
  const auto gather = ring_exposure(gathered, kv_send_s, 10e-3, link);
  CHECK(gather.kv_send_s == doctest::Approx(3 * kv_send_s));
  CHECK(gather.forward_exposed_s == doctest::Approx(2 * kv_send_s));
}

TEST_CASE("context parallel: a ring step on an H100 takes the flash attention time of its FLOPs") {
  const auto cluster = parse_cluster("8xH100-80GB", HardwareCatalog::builtin());
  const auto profile = profile_from_cluster(cluster);
  const auto shape = llama3_8b_attention(32768);
  const auto result = context_parallel_attention(shape, cp_options(4));
  const double forward_s = ring_step_compute_s(result, shape, profile, false);
  const double backward_s = ring_step_compute_s(result, shape, profile, true);
  CHECK(forward_s > 0);
  CHECK(backward_s > forward_s);
  // 550 GFLOP per step at a few hundred TFLOP/s (≈ 2 ms) outlasts a 32 MiB NVLink send (≈ 0.1 ms).
  const auto exposure = ring_exposure(result, forward_s, backward_s, profile.intra_node);
  CHECK(exposure.forward_exposed_s == 0);
}

TEST_CASE("context parallel: bad shapes and degrees are input errors") {
  CHECK_THROWS_AS(context_parallel_attention(llama3_8b_attention(32768), cp_options(0)), InputError);
  // 4100 tokens: a multiple of 4 but not of 2 × 4, which torch's balanced split needs.
  CHECK_THROWS_AS(context_parallel_attention(llama3_8b_attention(4100), cp_options(4)), InputError);
  CHECK_NOTHROW(context_parallel_attention(llama3_8b_attention(4100), cp_options(4, false)));
  auto shape = llama3_8b_attention(4096);
  shape.kv_heads = 0;
  CHECK_THROWS_AS(context_parallel_attention(shape, cp_options(2)), InputError);
}
