// Ring attention's FLOPs, bytes and exposed communication per CP rank (Note [Ring attention] in context_parallel.h).
#include "context_parallel.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "compute_cost.h"
#include "errors.h"

namespace shardplan {
namespace {

// torch's accumulation dtype for dK, dV (_ContextParallelOptions.convert_to_f32 = True → torch.float32).
constexpr int kGradKvElementBytes = 4;

void require_positive(std::int64_t value, const char* field) {
  if (value <= 0) {
    throw InputError(std::string("context parallel attention: ") + field + " must be positive, got " +
                     std::to_string(value));
  }
}

// Forward FLOPs of one rank that holds the query chunks `owned` of `chunks` equal chunks of the sequence, against
// every key chunk (Note [Load-balanced causal sharding]): a full chunk block is 4·c²·head_dim·heads·b FLOPs (QKᵀ
// and PV, 2 per multiply-add), a causal diagonal block half of it, a block above the diagonal nothing.
double rank_forward_flops(const AttentionShape& shape, std::int64_t chunks, const std::vector<std::int64_t>& owned) {
  const double chunk_tokens = static_cast<double>(shape.seq_len) / static_cast<double>(chunks);
  const double full_block_flops = 4.0 * chunk_tokens * chunk_tokens * static_cast<double>(shape.head_dim) *
                                  static_cast<double>(shape.heads) * static_cast<double>(shape.batch);
  double blocks = 0;
  for (std::int64_t query_chunk : owned) {
    if (!shape.causal) {
      blocks += static_cast<double>(chunks);
    } else {
      blocks += static_cast<double>(query_chunk) + 0.5;  // the key chunks before it, and half its own
    }
  }
  return blocks * full_block_flops;
}

double max_over_mean(const std::vector<double>& values) {
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  return mean > 0 ? *std::max_element(values.begin(), values.end()) / mean : 1.0;
}

double send_time_s(std::int64_t bytes, const LinkTier& link) {
  if (bytes <= 0) return 0;
  const double bytes_per_s = link.bus_bytes_per_s * link.efficiency;
  SHARDPLAN_CHECK(bytes_per_s > 0, "link tier '" + link.name + "' has no bandwidth or efficiency");
  return link.latency_s + static_cast<double>(bytes) / bytes_per_s;
}

}  // namespace

const char* to_string(KvRotateMethod method) {
  return method == KvRotateMethod::allgather ? "allgather" : "alltoall";
}

ContextParallelAttention context_parallel_attention(const AttentionShape& shape, const ContextParallelOptions& options) {
  if (options.degree < 1) {
    throw InputError("context parallel degree must be at least 1, got " + std::to_string(options.degree));
  }
  require_positive(shape.batch, "batch");
  require_positive(shape.seq_len, "seq_len");
  require_positive(shape.heads, "heads");
  require_positive(shape.kv_heads, "kv_heads");
  require_positive(shape.head_dim, "head_dim");
  require_positive(shape.element_bytes, "element_bytes");
  const std::int64_t cp = options.degree;

  ContextParallelAttention result;
  result.degree = options.degree;
  result.rotate_method = options.rotate_method;
  // torch refuses load balancing without a causal mask (_templated_ring_attention: "Load balancing requires
  // `is_causal=True`"); a single rank has nothing to balance.
  result.load_balanced = options.load_balance && shape.causal && cp > 1;
  const std::int64_t split = result.load_balanced ? 2 * cp : cp;
  if (shape.seq_len % split != 0) {
    throw InputError("context parallel: seq_len " + std::to_string(shape.seq_len) + " is not a multiple of " +
                     std::to_string(split) +
                     (result.load_balanced ? " (2 × cp: torch's load-balanced sharding cuts 2·cp equal chunks)"
                                           : " (cp)"));
  }
  result.tokens_per_rank = shape.seq_len / cp;

  const std::int64_t kv_elements = 2 * shape.batch * result.tokens_per_rank * shape.kv_heads * shape.head_dim;
  result.kv_bytes_per_ring_step = kv_elements * shape.element_bytes;
  result.grad_kv_bytes_per_ring_step = kv_elements * kGradKvElementBytes;
  result.attention_input_bytes_per_rank =
      shape.batch * result.tokens_per_rank * (shape.heads + 2 * shape.kv_heads) * shape.head_dim * shape.element_bytes;
  if (cp > 1) {
    result.forward_kv_ring_steps = options.degree - 1;
    result.backward_kv_ring_steps = options.degree - 1;
    result.backward_grad_kv_ring_steps = options.degree;
    result.forward_bytes_sent_per_layer = result.forward_kv_ring_steps * result.kv_bytes_per_ring_step;
    result.backward_bytes_sent_per_layer = result.backward_kv_ring_steps * result.kv_bytes_per_ring_step +
                                           result.backward_grad_kv_ring_steps * result.grad_kv_bytes_per_ring_step;
    result.kv_receive_buffer_bytes = options.rotate_method == KvRotateMethod::allgather
                                         ? cp * result.kv_bytes_per_ring_step
                                         : result.kv_bytes_per_ring_step;
  }

  for (std::int64_t rank = 0; rank < cp; ++rank) {
    result.forward_flops_per_rank_balanced.push_back(
        rank_forward_flops(shape, 2 * cp, {rank, 2 * cp - 1 - rank}));
    result.forward_flops_per_rank_contiguous.push_back(rank_forward_flops(shape, cp, {rank}));
  }
  result.forward_flops_per_rank =
      result.load_balanced ? result.forward_flops_per_rank_balanced : result.forward_flops_per_rank_contiguous;
  result.max_over_mean_flops = max_over_mean(result.forward_flops_per_rank);
  result.forward_flops_per_ring_step =
      *std::max_element(result.forward_flops_per_rank.begin(), result.forward_flops_per_rank.end()) /
      static_cast<double>(cp);
  if (cp > 1) {
    // Note [Ring tensor traffic].
    const double n = static_cast<double>(shape.batch * result.tokens_per_rank * shape.heads * shape.head_dim);
    const double n_kv = static_cast<double>(shape.batch * result.tokens_per_rank * shape.kv_heads * shape.head_dim);
    const double e = static_cast<double>(shape.element_bytes), f = kGradKvElementBytes, steps = static_cast<double>(cp);
    result.forward_tensor_bytes = 4 * e * n_kv + (steps - 1) * 4 * e * n_kv + steps * (e + f) * n +
                                  (steps - 1) * 8 * f * n + (f + e) * n;
    // 2 contiguous, cp − 1 cats, cp conversions, 3 tensor ops per merge, 1 result conversion
    result.forward_tensor_kernels = 2 + (steps - 1) + steps + 3 * (steps - 1) + 1;
    result.backward_tensor_bytes = f * (n + 2 * n_kv) + 4 * e * n_kv + (steps - 1) * 4 * e * n_kv +
                                   2 * (2 * f + e) * n_kv + (steps - 1) * 2 * ((2 * f + e) * n_kv / 2 + 2 * f * n_kv) +
                                   steps * (4 * f * n_kv + (2 * f + e) * n) + (f + e) * (n + 2 * n_kv);
    // 3 zeros, 2 contiguous, cp − 1 K/V cats, 2 step-0 sums, 4 per later step (two += and two cats), per step a dK/dV
    // cat and a dQ +=, 3 result conversions
    result.backward_tensor_kernels = 3 + 2 + (steps - 1) + 2 + 4 * (steps - 1) + 2 * steps + 3;
  }
  return result;
}

RingExposure ring_exposure(const ContextParallelAttention& attention, double forward_step_compute_s,
                           double backward_step_compute_s, const LinkTier& link) {
  SHARDPLAN_CHECK(forward_step_compute_s >= 0 && backward_step_compute_s >= 0,
                  "a ring step's compute time must be non-negative");
  RingExposure exposure;
  const int cp = attention.degree;
  if (cp <= 1) return exposure;
  const bool allgather = attention.rotate_method == KvRotateMethod::allgather;
  // An all-gather is a ring of cp − 1 steps over the same link, each moving one rank's K/V (nccl-tests' all-gather:
  // (n − 1)/n of the gathered output crosses each link; collective_cost.h).
  exposure.kv_send_s = allgather ? (cp - 1) * send_time_s(attention.kv_bytes_per_ring_step, link)
                                 : send_time_s(attention.kv_bytes_per_ring_step, link);
  exposure.grad_kv_send_s = send_time_s(attention.grad_kv_bytes_per_ring_step, link);

  // Forward: step i's window hides the K/V for step i + 1 (alltoall: every step but the last; allgather: step 0 only).
  const int forward_windows = allgather ? 1 : cp - 1;
  exposure.forward_comm_s = forward_windows * exposure.kv_send_s;
  exposure.forward_exposed_s = forward_windows * std::max(0.0, exposure.kv_send_s - forward_step_compute_s);

  // Backward: step i's window holds the K/V for step i + 1 (as forward) and the dK/dV sent after step i − 1.
  for (int step = 0; step < cp; ++step) {
    double window_comm_s = 0;
    if (allgather ? step == 0 : step < cp - 1) window_comm_s += exposure.kv_send_s;
    if (step > 0) window_comm_s += exposure.grad_kv_send_s;
    exposure.backward_comm_s += window_comm_s;
    exposure.backward_exposed_s += std::max(0.0, window_comm_s - backward_step_compute_s);
  }
  // The dK/dV sent after the last step is awaited at once (_templated_ring_attention_backward's final next_buffer).
  exposure.backward_comm_s += exposure.grad_kv_send_s;
  exposure.backward_exposed_s += exposure.grad_kv_send_s;
  return exposure;
}

double ring_step_compute_s(const ContextParallelAttention& attention, const AttentionShape& shape,
                           const HardwareProfile& profile, bool backward) {
  AttentionCall call;
  call.flops = attention.forward_flops_per_ring_step * (backward ? 2.0 : 1.0);
  call.seq_len = attention.tokens_per_rank;
  call.head_dim = shape.head_dim;
  call.backward = backward;
  return attention_time_s(call, shape.element_bytes, profile);
}

}  // namespace shardplan
