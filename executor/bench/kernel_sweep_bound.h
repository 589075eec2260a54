// The work and memory bound of `calibrate --bench`'s kernel sweep: what one pass over its kernels costs at a sequence
// length, and the sequence length it runs at so that the pass stays within the bound (Note [Kernel sweep bound]).
#pragma once

#include <cstdint>
#include <string>

#include "model_spec.h"

namespace shardplan::bench {

// Note [Kernel sweep bound]: the sweep times each distinct layer kind and each GEMM shape of the model at three token
// counts (kernel_token_shapes: a quarter sequence, one, four), so its cost grows with the model's widths and, through
// attention's s² and the logits, with the sequence. Issue 37: `calibrate --bench --model llama-1b --iters 1
// --warmup-iters 0` ran its default 2,048 tokens for over 200 s at 7.1 GB. Like plan's and simulate's work bounds
// (costmodel/input_limits.h), one pass over the sweep's kernels — every measurement once, the iteration --iters and
// --warmup-iters repeat — is bounded before anything is allocated, in FLOPs and in the largest measurement's memory:
// - the model's default length (no --seq-len) is scaled down, halving it until the pass fits, and the sweep says so in
//   its output (a benchmark of shorter sequences still fits the compute curve: kernel_token_shapes spans 16x);
// - an explicit --seq-len over the bound, or a model over it even at one token, is refused up front (exit 2), naming
//   the estimate, the bound and the longest --seq-len that fits.
// The pass's FLOPs are those the table prints (pass_kernels.h for layers, 2·M·N·K per GEMM); its memory is an upper
// estimate of the largest measurement's live buffers (kernel_sweep_bound.cpp), checked against peak RSS here.
// --iters and --warmup-iters multiply the pass, as they multiply the collective sweep's (itself bounded by
// --max-bytes), each at most 10,000. 2.5e11 FLOPs is about 10 s of the CPU runtime's fp32 kernels on one core
// (kReferenceFlopsPerS); 1 GiB is the bound the fuzzer holds every command to (scripts/fuzz-cli). tiny-llama's default
// sweep is far inside both; llama-1b's 2,048 tokens (1.6e13 FLOPs, 14.8 GB estimated) run at 32.
inline constexpr double kMaxKernelSweepFlopsPerPass = 2.5e11;
inline constexpr double kMaxKernelSweepBytes = 1073741824.0;  // 2^30
// Measured here (AMD EPYC, one core, issue 37's run): llama-1b's transformer_block at 512 tokens, 25.0 GFLOP/s forward
// and backward. Only used to say roughly how long a refused sweep would have taken.
inline constexpr double kReferenceFlopsPerS = 25e9;

// One pass over the sweep's kernels at a sequence length.
struct KernelSweepCost {
  double flops = 0;       // every row's FLOPs once (plus the reference forward each layer row starts from)
  double peak_bytes = 0;  // the largest single measurement's buffers, estimated from above
  bool fits() const { return flops <= kMaxKernelSweepFlopsPerPass && peak_bytes <= kMaxKernelSweepBytes; }
};
KernelSweepCost kernel_sweep_cost(const ModelSpec& model, std::int64_t seq_len);

// The sequence length the sweep runs at. requested_seq_len: the --seq-len given, 0 for the model's default.
struct BoundedSeqLen {
  std::int64_t seq_len = 0;        // what the sweep runs at
  std::int64_t default_seq_len = 0;  // the model's default (capped at its positions), when not given
  KernelSweepCost cost;            // at seq_len
  KernelSweepCost default_cost;    // at default_seq_len, when scaled down
  bool scaled_down = false;
};
// InputError (exit 2) when a given --seq-len's pass is over the bound, or the model's is at one token.
BoundedSeqLen bounded_kernel_seq_len(const ModelSpec& model, std::int64_t requested_seq_len);

// "# kernel sweep at --seq-len 256: ..." — the line the sweep prints when it scaled the default down.
std::string describe_scaled_down(const BoundedSeqLen& bounded);

}  // namespace shardplan::bench
