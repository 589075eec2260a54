// Context parallelism (ring attention over the CP group, as torch's context_parallel runs it): one attention layer's
// FLOPs per rank, K/V bytes per ring step and per pass, and the communication the attention compute cannot hide.
#pragma once

#include <cstdint>
#include <vector>

#include "hardware_profile.h"

namespace shardplan {

// Note [Ring attention]: torchtitan's context parallelism (torchtitan/distributed/utils.py create_context_parallel_ctx
// → torch.distributed.tensor.experimental.context_parallel; pytorch/pytorch torch/distributed/tensor/experimental/
// _attention.py at 0123248a484ffe531edb5098b986c1bac08cd296, _templated_ring_attention and
// _templated_ring_attention_backward) shards the sequence over the cp ranks and keeps each rank's queries at home
// while the keys and values travel:
// - Forward: cp attention steps. Before step i < cp − 1 each rank sends its current K and V (concatenated, in the
//   activations' dtype) to the next rank and then computes step i, so the send for step i + 1 overlaps step i's
//   attention: cp − 1 exchanges of b · s/cp · kv_heads · head_dim · 2 elements, kv_heads being the heads SDPA is
//   called with: with GQA every query head where the model copies K and V up to them first (repeat_kv: torchtitan's
//   Llama until pytorch/torchtitan#2259, 2026-01, e.g. at 9dec370, which its Dec 2024 H100 runs used; transformers'
//   sdpa path), the model's kv_heads where SDPA takes them grouped (enable_gqa, torchtitan since #2259).
// - Backward: the same cp − 1 K/V exchanges again, and after every one of the cp steps the partial dK, dV (fp32:
//   _ContextParallelOptions.convert_to_f32 accumulates in float32) go to the next rank, always by all-to-all. The
//   dK/dV sent after step i is awaited after step i + 1's compute; the last one (which brings each rank its own
//   gradients home) has no compute left to hide behind.
// - Rotation: torchtitan's [parallelism] context_parallel_rotate_method, "allgather" by default (torchtitan/config/
//   job_config.py): one all-gather of every rank's K/V issued before step 0 and awaited at step 1, so only step 0's
//   compute hides it; "alltoall" is the ring proper, one permute per step. Both move (cp − 1) × the local K/V.
// Note [Load-balanced causal sharding]: under a causal mask the contiguous split leaves rank r with r full blocks and
// one half (diagonal) block of the cp × cp block triangle, the last rank doing (2cp − 1)/cp × the mean. torch's
// round-robin ("headtail") balancer (_attention.py _generate_round_robin_indices) cuts the sequence into 2·cp chunks
// and gives rank i chunks i and 2cp − 1 − i, so every rank does 2·cp chunk-blocks (in units of one c × c block,
// c = s/(2cp)): each ring step is then half of a (s/cp)² block on every rank (_is_causal_behavior: step 0 causal over
// both local chunks; step i ≤ rank the first K/V chunk, i > rank the second query chunk). torch requires
// s % (2·cp) == 0 for it and refuses it without a causal mask.

// One attention layer as one CP rank group sees it. heads and kv_heads are those of one TP rank (tensor parallelism
// splits heads before context parallelism splits the sequence).
struct AttentionShape {
  std::int64_t batch = 1;       // micro-batch, sequences
  std::int64_t seq_len = 0;     // the whole sequence, before the CP split
  std::int64_t heads = 0;       // query heads
  std::int64_t kv_heads = 0;    // key/value heads (GQA: fewer than heads)
  std::int64_t head_dim = 0;
  int element_bytes = 2;        // the activations' dtype: bf16 = 2
  bool causal = true;
};

// torchtitan's [parallelism] context_parallel_rotate_method.
enum class KvRotateMethod { allgather, alltoall };
const char* to_string(KvRotateMethod method);

struct ContextParallelOptions {
  int degree = 1;                                     // cp
  bool load_balance = true;                           // torch's round-robin ("headtail") sharding; causal only
  KvRotateMethod rotate_method = KvRotateMethod::alltoall;
};

struct ContextParallelAttention {
  int degree = 1;
  bool load_balanced = false;                 // what torch runs: load_balance and causal
  KvRotateMethod rotate_method = KvRotateMethod::alltoall;
  std::int64_t tokens_per_rank = 0;           // s / cp per sequence
  int forward_kv_ring_steps = 0;              // cp − 1
  int backward_kv_ring_steps = 0;             // cp − 1
  int backward_grad_kv_ring_steps = 0;        // cp (the last brings each rank its own dK, dV)
  std::int64_t kv_bytes_per_ring_step = 0;    // one rank's K and V, activations' dtype
  std::int64_t grad_kv_bytes_per_ring_step = 0;  // one rank's dK and dV, fp32
  std::int64_t forward_bytes_sent_per_layer = 0;   // per rank
  std::int64_t backward_bytes_sent_per_layer = 0;  // per rank: K/V again plus dK/dV
  // Q, K and V of this rank's s/cp tokens, as the attention kernel reads (and autograd keeps) them.
  std::int64_t attention_input_bytes_per_rank = 0;
  // The K/V held beside the local ones while a step runs: the next step's buffer (alltoall) or every rank's
  // (allgather's gathered output).
  std::int64_t kv_receive_buffer_bytes = 0;
  // Forward attention FLOPs of each rank (4·q·k·head_dim·heads·b per full block, half on a causal diagonal block,
  // as FlashAttention-2 skips the masked half: model_spec.cpp masked_attention_share); backward does twice these
  // (DESIGN.md's compute rule). `balanced` is torch's round-robin sharding, `contiguous` the plain split.
  std::vector<double> forward_flops_per_rank_balanced;
  std::vector<double> forward_flops_per_rank_contiguous;
  std::vector<double> forward_flops_per_rank;  // the sharding torch runs (load_balanced ? balanced : contiguous)
  double forward_flops_per_ring_step = 0;      // the largest rank's forward FLOPs / cp: one step under balance
  double max_over_mean_flops = 1;              // of forward_flops_per_rank
  // Note [Ring tensor traffic]: the HBM bytes and kernels of the eager tensor ops around the attention kernels
  // (copies, the merges, the fp32 gradient sums), per layer pass of one rank; 0 for cp = 1.
  double forward_tensor_bytes = 0, forward_tensor_kernels = 0;
  double backward_tensor_bytes = 0, backward_tensor_kernels = 0;
};

// Note [Ring tensor traffic]: _templated_ring_attention and its backward (_attention.py at 0123248a, as Note [Ring
// attention]) run eager tensor ops around the flash kernels, each a memory-bound kernel that reads its inputs and
// writes its output once. With N the elements of the rank's q (and attention output), N_kv of its K (or V) as SDPA
// takes them, e the activations' bytes and f = 4 (convert_to_f32), for the rank whose every step after the first is
// a whole one (rank cp − 1, `i <= rank`: the largest traffic, as the FLOPs take the largest rank):
// - forward: key.contiguous() and value.contiguous() (4e·N_kv); per step before the last, torch.cat of K and V for
//   the rotater (4e·N_kv); per step _SDPAMerger.step's out.to(float32) ((e + f)·N); per step after the first,
//   _merge_one's out − block_out, sigmoid(·) × it and out − that (8f·N; the lse terms are 1/head_dim of it); the
//   result's .to(dtype) ((f + e)·N);
// - backward: zeros_like for the fp32 dQ, dK, dV (f·(N + 2N_kv)); K and V contiguous (4e·N_kv); per step before the
//   last the K/V cat (4e·N_kv); step 0's dK += and dV += ((2f + e)·N_kv each); per later step _partial_update of dK and
//   dV's first chunk (+= on half, (2f + e)·N_kv/2, then torch.cat of the chunks, 2f·N_kv; each); per step the dK/dV
//   cat for the rotater (4f·N_kv) and dQ += ((2f + e)·N); the results' .to(dtype) ((f + e)·(N + 2N_kv)).
// Not counted: the lse terms, and the flash kernels' own reads and writes (in their FLOP rate).
// Throws InputError for a degree < 1, non-positive dimensions, or a load-balanced causal split where seq_len is not a
// multiple of 2·cp (torch's assertion in _generate_round_robin_indices), or a plain one where it is not one of cp.
ContextParallelAttention context_parallel_attention(const AttentionShape& shape, const ContextParallelOptions& options);

// The ring's communication per layer against the attention compute it overlaps (Note [Ring attention]). A send over
// `link` takes latency_s + bytes / (bus_bytes_per_s × efficiency); two sends in one overlap window share the link.
struct RingExposure {
  double kv_send_s = 0;             // one K/V ring step (for allgather: the whole all-gather)
  double grad_kv_send_s = 0;        // one dK/dV ring step
  double forward_comm_s = 0;        // all the forward's sends, back to back
  double backward_comm_s = 0;
  double forward_exposed_s = 0;     // Σ over steps max(0, comm in the step's window − the step's compute)
  double backward_exposed_s = 0;    // likewise, plus the last dK/dV send, which nothing overlaps
};
// `forward_step_compute_s` and `backward_step_compute_s`: one ring step's attention kernel on a rank (every step the
// same under balanced sharding). cp = 1: all zero.
RingExposure ring_exposure(const ContextParallelAttention& attention, double forward_step_compute_s,
                           double backward_step_compute_s, const LinkTier& link);

// One ring step's attention kernel time on `profile` (compute_cost.h attention_time_s, on s/cp-token queries).
double ring_step_compute_s(const ContextParallelAttention& attention, const AttentionShape& shape,
                           const HardwareProfile& profile, bool backward);

}  // namespace shardplan
