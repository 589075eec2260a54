// Tests of compute cost: layer FLOPs and traffic per pass, roofline time, optimizer step and host copies.
#include <doctest/doctest.h>

#include "compute_cost.h"
#include "errors.h"
#include "precision.h"

using shardplan::ComputePass;
using shardplan::HardwareProfile;
using shardplan::LayerSpec;
using shardplan::TrainingConfig;

namespace {

// FLOPs and activation sizes set directly, so every expectation is arithmetic on these numbers.
LayerSpec hand_layer() {
  LayerSpec layer;
  layer.name = "block";
  layer.kind = shardplan::LayerKind::transformer_block;
  layer.flops.matmul_flops_per_token = 1000;
  layer.flops.attention_flops_per_token_per_position = 2;
  layer.activations.elements_per_token = 10;        // 20 bytes in bf16
  layer.activations.flash_stat_bytes_per_token = 4;  // with flash
  layer.activations.score_elements_per_token_per_position = 1;  // without flash: 2·s bytes in bf16
  return layer;
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
  profile.half_efficiency_flops = 1e9;
  profile.hbm_bytes_per_s = 1e9;
  profile.memory_efficiency = 0.5;
  profile.pcie_bytes_per_s = 4e9;
  return profile;
}

}  // namespace

TEST_CASE("compute: layer_work gives forward, backward and recompute FLOPs exactly") {
  const auto layer = hand_layer();
  const auto training = hand_training(true);
  // Per token with a causal flash kernel: 1000 + ½ · 2 · 100 = 1100; × 200 tokens.
  const auto forward = shardplan::layer_work(layer, training, ComputePass::forward);
  const auto backward = shardplan::layer_work(layer, training, ComputePass::backward);
  const auto recompute = shardplan::layer_work(layer, training, ComputePass::recompute);
  CHECK(forward.flops == 220'000);
  CHECK(backward.flops == 440'000);
  CHECK(recompute.flops == 220'000);
  // Activations (20 + 4) bytes × 200 tokens, written once; backward reads them and writes as much again.
  CHECK(forward.memory_bytes == 4'800);
  CHECK(recompute.memory_bytes == 4'800);
  CHECK(backward.memory_bytes == 9'600);
}

TEST_CASE("compute: causal skipping (flash) halves the attention FLOPs") {
  const auto layer = hand_layer();
  const auto flash = shardplan::layer_work(layer, hand_training(true), ComputePass::forward);
  const auto eager = shardplan::layer_work(layer, hand_training(false), ComputePass::forward);
  const double matmul = 1000.0 * 200;
  CHECK(eager.flops == 240'000);  // (1000 + 2·100) × 200
  CHECK(flash.flops - matmul == (eager.flops - matmul) / 2);
  // Eager attention keeps the s² scores: 20 + 2·100 bytes per token, no flash statistics.
  CHECK(eager.memory_bytes == (20.0 + 200.0) * 200);
}

TEST_CASE("compute: compute_time_s is the roofline of size-dependent compute and HBM bandwidth") {
  const auto profile = hand_profile();
  // 1 GFLOP = half_efficiency_flops → eff = 0.5 × ½ = 0.25; 1e9 / (1e12 × 0.25) = 4 ms. Compute-bound.
  CHECK(shardplan::compute_time_s({1e9, 1e3}, 2, profile) == doctest::Approx(4e-3).epsilon(1e-12));
  // fp32 uses its own peak: 1e9 / (1e11 × 0.25) = 40 ms.
  CHECK(shardplan::compute_time_s({1e9, 0}, 4, profile) == doctest::Approx(4e-2).epsilon(1e-12));
  // Memory-bound: 1e9 bytes / (1e9 × 0.5) = 2 s beats the 4 ms of compute.
  CHECK(shardplan::compute_time_s({1e9, 1e9}, 2, profile) == doctest::Approx(2.0).epsilon(1e-12));
  CHECK(shardplan::compute_time_s({0, 0}, 2, profile) == 0);
  // Larger GEMMs run at higher efficiency: 9 GFLOP → eff = 0.5 × 0.9 = 0.45.
  CHECK(shardplan::compute_time_s({9e9, 0}, 2, profile) == doctest::Approx(9e9 / (1e12 * 0.45)).epsilon(1e-12));
  CHECK_THROWS_AS(shardplan::compute_time_s({-1, 0}, 2, profile), shardplan::InternalError);
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
