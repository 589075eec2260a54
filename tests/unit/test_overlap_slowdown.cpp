// Tests of the overlap slowdown by kernel kind (Note [Overlap slowdown by kernel kind] in overlap_slowdown.h): passes
// stretched by their kernels' time-weighted factors, the single legacy key, and the catalog's measured values.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "cluster.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "op_placement.h"
#include "overlap_slowdown.h"
#include "schedule.h"

using namespace shardplan;

namespace {

constexpr double ms = 1e-3;

// Round rates: GEMMs at 1 TFLOP/s (no fixed cost), flash attention at a quarter of it (0.5 plateau × s / (s + s½) with
// s = s½), HBM at 1 TB/s, no launch floor.
HardwareProfile round_profile() {
  HardwareProfile profile;
  profile.peak_bf16_flops = profile.peak_fp16_flops = profile.peak_fp32_flops = 1e12;
  profile.max_compute_efficiency = 1.0;
  profile.half_efficiency_flops = 0.0;
  profile.clock_fraction = 1.0;
  profile.attention_forward_efficiency = profile.attention_backward_efficiency = 0.5;
  profile.attention_half_seq_len = 1000;
  profile.hbm_bytes_per_s = 1e12;
  profile.memory_efficiency = 1.0;
  profile.kernel_dispatch_s = 0.0;
  profile.set_overlap_slowdowns(1.5, 1.25, 1.8);
  return profile;
}

Op layer_pass(PassKernels kernels, std::int64_t zeroed_bytes) {
  Op op;
  op.kind = OpKind::forward;
  op.stream = StreamKind::compute;
  op.kernels = std::make_shared<const PassKernels>(std::move(kernels));
  op.zeroed_bytes = zeroed_bytes;
  return op;
}

// The op's end when it starts at 0 beside a 1 ms all-gather that also starts at 0.
double end_beside_gather_s(const Op& op, const HardwareProfile& profile) {
  OpWalk walk(profile);
  walk.place(OpKind::all_gather, StreamKind::all_gather, 1 * ms, 1.0, kNoDependency, nullptr);
  return walk
      .place(op.kind, op.stream, base_duration_s(op, 2, profile), overlap_slowdown(op, 2, profile), kNoDependency,
             nullptr)
      .end_s;
}

}  // namespace

TEST_CASE("overlap slowdown: a GEMM-heavy and an attention-heavy pass stretch by their kernels' kinds") {
  const HardwareProfile profile = round_profile();
  // GEMM-heavy: a 2 GFLOP GEMM (2 ms) and a 0.5 GB gradient zero-fill (0.5 ms, memory-bound).
  PassKernels gemm_heavy;
  gemm_heavy.gemms.push_back({1000, 1000, 1000});
  const Op gemm_pass = layer_pass(gemm_heavy, 500'000'000);
  // Attention-heavy: 0.5 GFLOP of flash attention at 0.25 TFLOP/s (2 ms) and a 0.5 GFLOP GEMM (0.5 ms).
  PassKernels attention_heavy;
  attention_heavy.attention.push_back({0.5e9, 1000, 128});
  attention_heavy.gemms.push_back({1000, 1000, 250});
  const Op attention_pass = layer_pass(attention_heavy, 0);
  REQUIRE(base_duration_s(gemm_pass, 2, profile) == doctest::Approx(2.5 * ms));
  REQUIRE(base_duration_s(attention_pass, 2, profile) == doctest::Approx(2.5 * ms));
  // (2 × 1.5 + 0.5 × 1.8) / 2.5 = 1.56 and (2 × 1.25 + 0.5 × 1.5) / 2.5 = 1.3.
  CHECK(overlap_slowdown(gemm_pass, 2, profile) == doctest::Approx(1.56));
  CHECK(overlap_slowdown(attention_pass, 2, profile) == doctest::Approx(1.3));
  // 1 ms of each overlaps the gather: 2.5 + 0.56 × 1 and 2.5 + 0.3 × 1 ms.
  CHECK(end_beside_gather_s(gemm_pass, profile) == doctest::Approx(3.06 * ms));
  CHECK(end_beside_gather_s(attention_pass, profile) == doctest::Approx(2.8 * ms));
  // The optimizer step is memory-bound work; ops that do no compute work are never stretched.
  Op optimizer;
  optimizer.kind = OpKind::optimizer_step;
  CHECK(overlap_slowdown(optimizer, 2, profile) == 1.8);
  Op wait;
  wait.kind = OpKind::wait;
  CHECK(overlap_slowdown(wait, 2, profile) == 1.0);
  // A pass without kernel time (no kernels, nothing zero-filled) takes the memory-bound factor.
  CHECK(pass_overlap_slowdown(PassTime{}, 0.0, profile) == 1.8);
}

TEST_CASE("overlap slowdown: the device's optimizer step stretches as memory-bound work, the host's (CPU offload) not") {
  const HardwareProfile profile = round_profile();
  Op step;
  step.kind = OpKind::optimizer_step;
  step.stream = StreamKind::compute;
  step.memory_bytes = 1'000'000'000;  // 1 ms at the round profile's 1 TB/s
  CHECK(overlap_slowdown(step, 2, profile) == 1.8);
  // Beside the 1 ms gather: its whole 1 ms base stretched by the memory-bound 1.8.
  CHECK(end_beside_gather_s(step, profile) == doctest::Approx(1.8 * ms));
  step.on_host = true;
  HardwareProfile with_host = profile;
  with_host.host_memory_bytes_per_s = 100e9;
  CHECK(overlap_slowdown(step, 2, with_host) == 1.0);
  // On the host its time is the host's optimizer rate's, unstretched by the gather.
  const double host_s = base_duration_s(step, 2, with_host);
  REQUIRE(host_s > 1 * ms);  // it runs beside the whole gather
  CHECK(end_beside_gather_s(step, with_host) == doctest::Approx(host_s));
}

TEST_CASE("overlap slowdown: a profile's single overlap_compute_slowdown sets all three kinds, a kind's own key wins") {
  const HardwareProfile base = round_profile();
  const HardwareProfile legacy =
      apply_profile_json(base, {{"schema", "shardplan.profile/v1"}, {"overlap_compute_slowdown", 1.4}}, "old.json");
  CHECK(legacy.overlap_gemm_slowdown == 1.4);
  CHECK(legacy.overlap_attention_slowdown == 1.4);
  CHECK(legacy.overlap_memory_slowdown == 1.4);
  CHECK(legacy.overlap_compute_slowdown == 1.4);
  const nlohmann::json both = {
      {"schema", "shardplan.profile/v1"}, {"overlap_compute_slowdown", 1.4}, {"overlap_attention_slowdown", 1.9}};
  const HardwareProfile mixed = apply_profile_json(base, both, "mixed.json");
  CHECK(mixed.overlap_gemm_slowdown == 1.4);
  CHECK(mixed.overlap_attention_slowdown == 1.9);
  CHECK(mixed.overlap_memory_slowdown == 1.4);
  CHECK(mixed.overlap_compute_slowdown == 1.4);  // the least of the three
  CHECK_THROWS_AS(apply_profile_json(base, {{"schema", "shardplan.profile/v1"}, {"overlap_gemm_slowdown", 0.9}}, "p"),
                  InputError);

  HardwareCatalog catalog = HardwareCatalog::builtin();
  catalog.merge_user_json({{"gpus", {{{"name", "H100-80GB"}, {"overlap_compute_slowdown", 1.3}}}}}, "cat.json");
  CHECK(catalog.gpu("H100-80GB").overlap_gemm_slowdown == 1.3);
  CHECK(catalog.gpu("H100-80GB").overlap_attention_slowdown == 1.3);
  CHECK(catalog.gpu("H100-80GB").overlap_memory_slowdown == 1.3);
  catalog.merge_user_json(
      {{"gpus", {{{"name", "A100-40GB"}, {"overlap_compute_slowdown", 1.3}, {"overlap_memory_slowdown", 1.6}}}}},
      "cat.json");
  CHECK(catalog.gpu("A100-40GB").overlap_gemm_slowdown == 1.3);
  CHECK(catalog.gpu("A100-40GB").overlap_memory_slowdown == 1.6);
}

TEST_CASE("overlap slowdown: the catalog's kernel-level values for A100, H100 and H200, and sustained clocks") {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  const auto profile = [&](const std::string& gpu) {
    return profile_from_cluster(parse_cluster("1x8x" + gpu, catalog));
  };
  for (const char* a100 : {"A100-40GB", "A100-80GB"}) {
    const HardwareProfile p = profile(a100);
    CHECK(p.overlap_gemm_slowdown == doctest::Approx(2.08 / 1.18));  // NVIDIA/nccl#1428
    CHECK(p.overlap_attention_slowdown == doctest::Approx(0.33 / 0.18));
    CHECK(p.overlap_memory_slowdown == 1.8);
    CHECK(p.overlap_compute_slowdown == doctest::Approx(2.08 / 1.18));
  }
  for (const char* hopper : {"H100-80GB", "H200-141GB"}) {
    const HardwareProfile p = profile(hopper);
    CHECK(p.overlap_gemm_slowdown == doctest::Approx(1.35));  // pytorch/pytorch#179937: 30-40 % in training
    CHECK(p.overlap_attention_slowdown == doctest::Approx(0.33 / 0.18));
    CHECK(p.overlap_memory_slowdown == 1.8);
    CHECK(p.clock_fraction == 1.0);
  }
  // Elsewhere the population average for every kind (Lee et al.).
  for (const char* other : {"B200", "MI300X"}) {
    const HardwareProfile p = profile(other);
    CHECK(p.overlap_gemm_slowdown == 1.189);
    CHECK(p.overlap_attention_slowdown == 1.189);
    CHECK(p.overlap_memory_slowdown == 1.189);
  }
}
