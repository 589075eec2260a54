// Tests of the op-level compute model: a pass's kernels (GEMM shapes, attention, memory traffic) and their times.
#include <doctest/doctest.h>

#include "compute_cost.h"
#include "errors.h"
#include "pass_kernels.h"
#include "precision.h"

using shardplan::ActivationCheckpointing;
using shardplan::ComputePass;
using shardplan::HardwareProfile;
using shardplan::LayerSpec;
using shardplan::ModelSpec;
using shardplan::PassKernels;
using shardplan::TrainingConfig;

namespace {

// One block with two projections (10 → 30 saved by the op policy, 30 → 10 not), 2 heads of 5, and two memory-bound
// kernels: every expectation below is arithmetic on these numbers.
ModelSpec hand_model() {
  LayerSpec block;
  block.name = "block";
  block.kind = shardplan::LayerKind::transformer_block;
  block.tensors = {{"w1", {30, 10}}, {"w2", {10, 30}}};
  shardplan::LayerKernelSpec spec;
  spec.projections = {{"w1", 10, 30, true}, {"w2", 30, 10, false}};
  spec.attention = shardplan::AttentionSpec{2, 5, true};
  shardplan::ElementwiseSpec norm;
  norm.name = "norm";
  norm.forward = {4, 1, 0, 3};   // 4 bf16 + 1 fp32 elements per token in 3 kernels
  norm.backward = {8, 2, 0, 6};
  shardplan::ElementwiseSpec last_add;
  last_add.name = "add";
  last_add.forward = {3, 0, 0, 1};
  last_add.backward = {3, 0, 0, 1};
  last_add.recomputed_by_op_policy = false;
  spec.elementwise = {norm, last_add};
  block.kernels = spec;
  ModelSpec model;
  model.name = "hand";
  model.hidden_size = 10;
  model.num_heads = 2;
  model.layers = {block};
  return model;
}

TrainingConfig hand_training(bool flash) {
  TrainingConfig training;
  training.seq_len = 100;
  training.micro_batch = 2;  // 200 tokens
  training.precision = shardplan::precision_recipe("bf16-mixed");
  training.flash_attention = flash;
  return training;
}

HardwareProfile hand_profile() {
  HardwareProfile profile;
  profile.peak_bf16_flops = 1e12;
  profile.peak_fp32_flops = 1e11;
  profile.max_compute_efficiency = 0.5;
  profile.clock_fraction = 0.8;
  profile.half_efficiency_flops = 1e9;
  profile.attention_forward_efficiency = 0.25;
  profile.attention_backward_efficiency = 0.2;
  profile.attention_half_seq_len = 100;
  profile.hbm_bytes_per_s = 1e9;
  profile.memory_efficiency = 0.5;
  profile.pcie_bytes_per_s = 4e9;
  profile.kernel_dispatch_s = 0;
  return profile;
}

PassKernels kernels(ComputePass pass, bool flash = true,
                    ActivationCheckpointing mode = ActivationCheckpointing::none) {
  return shardplan::pass_kernels(hand_model(), 0, hand_training(flash), pass, mode);
}

}  // namespace

TEST_CASE("pass kernels: forward GEMMs are tokens × out × in; backward adds the input and weight gradients") {
  const PassKernels forward = kernels(ComputePass::forward);
  REQUIRE(forward.gemms.size() == 2);
  CHECK(forward.gemms[0] == shardplan::GemmCall{200, 30, 10, 1});
  CHECK(forward.gemms[1] == shardplan::GemmCall{200, 10, 30, 1});
  const PassKernels backward = kernels(ComputePass::backward);
  REQUIRE(backward.gemms.size() == 4);
  CHECK(backward.gemms[0] == shardplan::GemmCall{200, 10, 30, 1});  // dX = dY·W
  CHECK(backward.gemms[1] == shardplan::GemmCall{30, 10, 200, 1});  // dW = dYᵀ·X
  CHECK(backward.gemm_flops() == 2 * forward.gemm_flops());
  // Memory-bound: forward (4·2 + 1·4 + 3·2) bytes × 200 tokens = 3,600; backward (8·2 + 2·4 + 3·2) × 200 = 6,000.
  CHECK(forward.memory_bytes == 3'600);
  CHECK(backward.memory_bytes == 6'000);
  CHECK(forward.memory_kernels == 4);
  CHECK(forward.kernel_count() == 2 + 1 + 4);  // GEMMs, one attention kernel, memory-bound kernels
}

TEST_CASE("pass kernels: flash attention halves causal FLOPs, and its backward is 2.5× (FlashAttention-2 §4.1)") {
  const PassKernels forward = kernels(ComputePass::forward);
  const PassKernels backward = kernels(ComputePass::backward);
  REQUIRE(forward.attention.size() == 1);
  // 4·s²·d·heads per sequence = 4 · 100² · 5 · 2 = 400,000, × 2 sequences, ½ causal.
  CHECK(forward.attention[0].flops == 400'000);
  CHECK(forward.attention[0].seq_len == 100);
  CHECK(forward.attention[0].head_dim == 5);
  CHECK_FALSE(forward.attention[0].backward);
  REQUIRE(backward.attention.size() == 1);
  CHECK(backward.attention[0].flops == 1'000'000);
  CHECK(backward.attention[0].backward);

  // Eager attention: QKᵀ and P·V as batched GEMMs over 2 sequences × 2 heads (no causal skipping), and the scores'
  // traffic (6 bf16 + 2 fp32 elements per score: 20 bytes × 100² × 4).
  const PassKernels eager = kernels(ComputePass::forward, false);
  CHECK(eager.attention.empty());
  REQUIRE(eager.gemms.size() == 4);
  CHECK(eager.gemms[2] == shardplan::GemmCall{100, 100, 5, 4});
  CHECK(eager.gemms[3] == shardplan::GemmCall{100, 5, 100, 4});
  CHECK(eager.gemm_flops() - forward.gemm_flops() == 2 * 2.0 * 100 * 100 * 5 * 4);
  CHECK(eager.memory_bytes - forward.memory_bytes == 20.0 * 100 * 100 * 4);
}

TEST_CASE("pass kernels: what each checkpointing mode recomputes") {
  CHECK(kernels(ComputePass::recompute, true, ActivationCheckpointing::none).empty());
  CHECK(kernels(ComputePass::recompute, true, ActivationCheckpointing::full) == kernels(ComputePass::forward));
  // Korthikanti's attention-core recompute: nothing with flash (its backward recomputes the scores anyway), the
  // attention core when eager.
  CHECK(kernels(ComputePass::recompute, true, ActivationCheckpointing::selective).empty());
  const PassKernels core = kernels(ComputePass::recompute, false, ActivationCheckpointing::selective);
  CHECK(core.gemms.size() == 2);
  CHECK(core.gemms[0].m == 100);
  // torchtitan's selective-op policy: the unsaved projection (w2), no attention, the norm but not the last add.
  const PassKernels op = kernels(ComputePass::recompute, true, ActivationCheckpointing::selective_op);
  REQUIRE(op.gemms.size() == 1);
  CHECK(op.gemms[0] == shardplan::GemmCall{200, 10, 30, 1});
  CHECK(op.attention.empty());
  CHECK(op.memory_bytes == (4 * 2 + 1 * 4) * 200);
  CHECK(op.memory_kernels == 3);
}

TEST_CASE("compute: each kernel's time, by hand") {
  HardwareProfile profile = hand_profile();
  profile.hbm_bytes_per_s = 1e13;  // GEMMs compute-bound first
  // GEMM: (F + f½) / (peak · E · clock); a 1000³ GEMM: (2e9 + 1e9) / (1e12 · 0.5 · 0.8) = 7.5 ms.
  CHECK(shardplan::gemm_time_s({1000, 1000, 1000, 1}, 2, profile) == doctest::Approx(7.5e-3).epsilon(1e-12));
  // fp32 uses its own peak: (2e9 + 1e9) / (1e11 · 0.4) = 75 ms.
  CHECK(shardplan::gemm_time_s({1000, 1000, 1000, 1}, 4, profile) == doctest::Approx(7.5e-2).epsilon(1e-12));
  // A GEMM with a short dimension is memory-bound: 1e6 × 1 × 1e6 moves 2·(1e6 + 1e6 + 1e12) bytes at 0.5 GB/s
  // (hand_profile's memory rate), far longer than its (2e12 + 1e9) / 4e11 = 5 s of compute.
  CHECK(shardplan::gemm_time_s({1'000'000, 1'000'000, 1, 1}, 2, hand_profile()) ==
        doctest::Approx(2.0 * (1e6 + 1e6 + 1e12) / 5e8).epsilon(1e-12));
  // Attention: 1e9 FLOPs at s = 100 = s½ (half the plateau), head dim 64 (× 0.89):
  // 1e9 / (1e12 · 0.8 · 0.25 · 0.5 · 0.89).
  const shardplan::AttentionCall forward{1e9, 100, 64, false};
  CHECK(shardplan::attention_time_s(forward, 2, profile) ==
        doctest::Approx(1e9 / (1e12 * 0.8 * 0.25 * 0.5 * 0.89)).epsilon(1e-12));
  const shardplan::AttentionCall backward{1e9, 300, 128, true};  // s / (s + s½) = 0.75, backward plateau 0.2
  CHECK(shardplan::attention_time_s(backward, 2, profile) ==
        doctest::Approx(1e9 / (1e12 * 0.8 * 0.2 * 0.75)).epsilon(1e-12));
  CHECK(shardplan::memory_time_s(1e9, hand_profile()) == doctest::Approx(2.0).epsilon(1e-12));
  CHECK_THROWS_AS(shardplan::buffer_fill_time_s(-1, profile), shardplan::InternalError);
}

TEST_CASE("compute: a pass's kernels add up along the stream, and the host's launches bound it from below") {
  HardwareProfile profile = hand_profile();
  const PassKernels forward = kernels(ComputePass::forward);
  const shardplan::PassTime time = shardplan::pass_time(forward, 2, profile);
  double gemm_s = 0;
  for (const auto& gemm : forward.gemms) gemm_s += shardplan::gemm_time_s(gemm, 2, profile);
  CHECK(time.gemm_s == doctest::Approx(gemm_s).epsilon(1e-12));
  CHECK(time.attention_s == doctest::Approx(shardplan::attention_time_s(forward.attention[0], 2, profile)));
  CHECK(time.memory_s == doctest::Approx(3'600 / 5e8).epsilon(1e-12));
  // A sum, not a roofline max: the memory-bound kernels do not hide under the GEMMs.
  CHECK(time.total_s == doctest::Approx(time.gemm_s + time.attention_s + time.memory_s).epsilon(1e-12));
  // 7 kernels at 1 s each of host dispatch: the host is the bottleneck.
  profile.kernel_dispatch_s = 1.0;
  CHECK(shardplan::pass_time_s(forward, 2, profile) == doctest::Approx(7.0).epsilon(1e-12));
}

TEST_CASE("compute: a layer without a kernel spec gets kernels derived from its FLOPs and activations") {
  ModelSpec model = hand_model();
  LayerSpec& layer = model.layers[0];
  layer.kernels.reset();
  layer.flops.matmul_flops_per_token = 2.0 * 10 * 10 * 2.5;  // two and a half 10 × 10 projections
  layer.flops.attention_flops_per_token_per_position = 4.0 * 10;
  layer.activations.elements_per_token = 16;
  const PassKernels forward = shardplan::pass_kernels(model, 0, hand_training(true), ComputePass::forward,
                                                      ActivationCheckpointing::none);
  REQUIRE(forward.gemms.size() == 3);
  CHECK(forward.gemms[2] == shardplan::GemmCall{200, 5, 10, 1});
  CHECK(forward.gemm_flops() == doctest::Approx(layer.flops.matmul_flops_per_token * 200));
  REQUIRE(forward.attention.size() == 1);
  CHECK(forward.attention[0].head_dim == 5);  // 10 wide over the model's 2 heads
  CHECK(forward.memory_bytes == 16 * 2 * 200);  // the kept elements, written once in forward
}

TEST_CASE("compute: optimizer step and host copies are bandwidth-bound, exactly") {
  const auto profile = hand_profile();
  const auto bf16_mixed = shardplan::precision_recipe("bf16-mixed");
  // bf16-mixed AdamW: 2·4 (param r+w) + 4 (grad read) + 2·8 (m, v r+w) = 28 bytes per shard element.
  CHECK(shardplan::optimizer_step_time_s(1'000'000, bf16_mixed, shardplan::OptimizerKind::adamw, profile) ==
        doctest::Approx(28e6 / (1e9 * 0.5)).epsilon(1e-12));
  // zero-fp16 AdamW: 2·2 + 2 + 2·12 = 30 bytes; plain SGD in fp32: 2·4 + 4 = 12 bytes.
  CHECK(shardplan::optimizer_step_time_s(1'000, shardplan::precision_recipe("zero-fp16"),
                                         shardplan::OptimizerKind::adamw, profile) ==
        doctest::Approx(30e3 / 5e8).epsilon(1e-12));
  CHECK(shardplan::optimizer_step_time_s(1'000, shardplan::precision_recipe("fp32"), shardplan::OptimizerKind::sgd,
                                         profile) == doctest::Approx(12e3 / 5e8).epsilon(1e-12));
  CHECK(shardplan::optimizer_step_time_s(0, bf16_mixed, shardplan::OptimizerKind::adamw, profile) == 0);
  CHECK(shardplan::host_copy_time_s(8'000'000'000, profile) == doctest::Approx(2.0).epsilon(1e-12));
  CHECK(shardplan::host_copy_time_s(0, profile) == 0);
  CHECK_THROWS_AS(shardplan::host_copy_time_s(-1, profile), shardplan::InternalError);
}
