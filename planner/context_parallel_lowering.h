// Context parallelism in the lowering: one CP rank's plan (its share of every sequence), the checks a CP plan must
// pass, and the ring attention each attention layer runs (Note [Context-parallel lowering]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "context_parallel.h"
#include "model_spec.h"
#include "plan.h"
#include "training.h"

namespace shardplan {

// Note [Context-parallel lowering]: a plan with context_parallel.degree cp > 1 (Note [Context parallel policy] in
// plan.h) lowers as the program of one CP rank, as torchtitan runs it (its context_parallel context shards the
// inputs, labels and RoPE buffers along the sequence; Note [Ring attention] in costmodel/context_parallel.h):
//  - the rank's plan is the plan on seq_len / cp tokens of each sequence (context_parallel_rank_plan): every
//    per-token cost — projections, norms, the loss, kept activations, workspaces — is the rank's share, so
//    activation memory and that compute drop by cp; the schedule's tokens per step (seq / cp × the data-parallel
//    ranks, which include cp) stay the whole batch's;
//  - the attention of each layer pass runs the cp ring steps torch's load-balanced sharding gives, each a causal
//    half of an (s/cp)² block (context_parallel_attention's forward_flops_per_ring_step): pass_kernels on s/cp tokens
//    yields exactly one such kernel, and the lowering adds the other cp − 1 (the op's kernels, so the simulator times
//    them at the flash kernel's rate for s/cp-token calls); model FLOPs (MFU) count the whole sequence's attention;
//  - the ring's exchanges are ops of their own: per attention layer forward, cp − 1 K/V sends; backward, cp − 1 K/V
//    sends and cp dK/dV sends (fp32); a full recompute runs the forward's again (torchtitan's selective-op policy
//    saves SDPA's output, so no other recompute does), each of context_parallel.cpp's bytes per ring step. They go on
//    the p2p stream as `send` ops, costed by point_to_point_time_s over the tier joining two neighbouring CP ranks:
//    a ring step is every rank sending its buffer to the next one and receiving from the one before (torch's
//    _RotateMethod.ALL_TO_ALL is a permute_tensor; the default ALL_GATHER's NCCL ring moves the same cp − 1 buffers
//    link by link), which is nccl-tests' sendrecv, not an all-to-all (whose (n − 1)/n of S per rank would charge a
//    ring step's buffer split cp ways). CP ranks sit next to each other after tp in torchtitan's mesh order, so a
//    CP group crosses nodes exactly when cp × tp exceeds a node's GPUs, and then its slowest link is a NIC rail.
//  - Overlap: a pass's sends wait for the compute op before it (the K and V exist once the pass begins; their
//    projection is not split out) and the next compute op waits for the last of them, so the simulator hides them
//    behind the whole layer pass — wider than torch's windows (each send hides behind one ring step's attention
//    only, Note [Ring attention]), so the exposed time is a lower bound where the ring is slower than the attention;
//    the final dK/dV send, which brings every rank its own gradients after the last step, waits for the backward op
//    and is never hidden, as in torch. ring_exposure (context_parallel.h) gives torch's per-step windows.
//  - Memory: each pass's receive buffer (one ring step's K/V, plus dK/dV in backward) is a comm buffer from its first
//    send to its last.
//  - Execution: the CPU runner runs such a program (Note [Context-parallel runner] in executor/runner/
//    context_parallel_runner.h): its ring attention posts exactly these sends' steps, with these bytes, inside the
//    pass after them (the send ops are markers there), each step also one receive; its tests count them per step.
// Under pipeline parallelism each pipeline rank's program is one CP rank's (Note [Pipeline programs]); the CPU runner
// refuses that pair. Not lowered yet, refused by validate_context_parallel: expert parallelism, layers with their own
// token count (vision towers), sliding-window or chunked attention (torch's ring attention takes is_causal masks
// only), attention without a fused kernel (torch's context_parallel dispatches SDPA's flash and efficient kernels).

// Note [Fixed context parallel degree]: the searches with a pinned cp run on one CP rank's share of every sequence —
// seq_len / cp tokens, the global batch counted in those shares (× cp; 0 stays 0: one micro-batch per rank) — and
// give every plan they simulate the degree and the whole sequence back (context_parallel_plan_of_share), so each is
// simulated as the CP plan it stands for.
TrainingConfig context_parallel_share_training(const TrainingConfig& training, int degree);

// The CP plan of `degree` that a plan of one CP rank's share (context_parallel_share_training) stands for: the whole
// sequence and the batch in whole sequences back, the degree set. A plan that already has the degree is returned as
// it is (a search's plans pass through here once per simulation, refinements of restored plans included).
Plan context_parallel_plan_of_share(const Plan& share_plan, int degree);

// The ring one CP rank's lowering runs: the degree and the whole sequence it splits.
struct ContextParallelRing {
  int degree = 1;
  std::int64_t seq_len = 0;
  bool enabled() const { return degree > 1; }
};

// InputError starting "`where` `degree`: " when the degree is below 1, or above 1 with a training or model the ring
// lowering does not take (Note [Context-parallel lowering]), or a seq_len that is not a multiple of 2·cp (torch's
// load-balanced sharding, Note [Load-balanced causal sharding]).
void validate_context_parallel(int degree, const TrainingConfig& training, const ModelSpec& model,
                               const std::string& where);

// One CP rank's plan: `plan` on seq_len / cp tokens of each sequence, context_parallel kept.
Plan context_parallel_rank_plan(const Plan& plan);

// The ring attention of `layer` for one micro-batch of `training` (whose seq_len is the whole sequence) over `degree`
// ranks; nullopt for a layer without attention. kv_heads from the model's architecture, split as its TP shard's.
std::optional<ContextParallelAttention> layer_ring_attention(const ModelSpec& model, std::size_t layer,
                                                             const TrainingConfig& training, int degree);

}  // namespace shardplan
