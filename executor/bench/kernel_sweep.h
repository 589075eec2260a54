// The compute sweep of `calibrate --bench`: each distinct layer kind's forward and backward through the CPU runtime's
// kernels, and the GEMM shapes of the model's linear layers, at the token counts the model trains with.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench_timer.h"
#include "communicator.h"
#include "model_spec.h"

namespace shardplan::bench {

// What a timed kernel is, for the fit it feeds: a whole layer pass (the simulator's compute op), a single GEMM, or
// memory-bound work (the optimizer step).
enum class KernelClass { layer, gemm, memory };
const char* to_string(KernelClass kind);

struct KernelRow {
  std::string name;        // "transformer_block backward", "gemm 128x384x128 fwd (mlp.gate_proj, mlp.up_proj)"
  KernelClass kind = KernelClass::layer;
  std::int64_t size = 0;   // tokens (layers, GEMM rows M) or elements (memory-bound work)
  double flops = 0;        // the pass's kernels (pass_kernels.h), or 2·M·N·K per GEMM
  double bytes = 0;        // memory-bound work (or a layer pass's memory-bound kernels): bytes moved
  double time_s = 0;       // mean per iteration, slowest rank
  double gemm_count = 0;   // GEMM kernels the row ran (a layer pass's, or 1 forward and 2 backward per GEMM)
};

struct KernelSweepOptions {
  std::int64_t seq_len = 0;  // 0: the model's default sequence length, capped at its positions
  TimingOptions timing{2, 10};
};

// The (micro-batch, sequence) shapes layers run at: a quarter sequence, one sequence, four sequences — token counts
// a factor 4 apart, so the fit sees the efficiency curve rise with op size.
struct TokenShape {
  int micro_batch = 1;
  int seq_len = 1;
  std::int64_t tokens() const { return static_cast<std::int64_t>(micro_batch) * seq_len; }
};
std::vector<TokenShape> kernel_token_shapes(const ModelSpec& model, const KernelSweepOptions& options);

// A weight-matrix shape y[M × out] = x[M × in] · Wᵀ and the tensors that have it.
struct GemmShape {
  std::int64_t out_features = 0;
  std::int64_t in_features = 0;
  std::vector<std::string> tensors;
};
// Distinct 2-D weight shapes of the model's transformer blocks and lm_head, in first-seen order.
std::vector<GemmShape> model_gemm_shapes(const ModelSpec& model);

// One index per distinct layer kind, in model order (the first embedding, block, norm and lm_head): the layers the
// sweep times.
std::vector<std::size_t> distinct_layer_kinds(const ModelSpec& model);

// Checks up front that the CPU runtime can run `model`'s layers (runtime::make_layer_kernel); InputError otherwise.
void check_kernel_sweep_model(const ModelSpec& model);

// Times every distinct layer kind (forward, backward) and every GEMM shape (forward, backward) at each token shape.
// Every rank runs the kernels at once, as in a training step; times are the slowest rank's. Collective over `world`.
std::vector<KernelRow> run_kernel_sweep(const ModelSpec& model, const KernelSweepOptions& options,
                                        comm::Communicator& world,
                                        const std::function<void(const KernelRow&)>& on_row = {});

}  // namespace shardplan::bench
