// Tests of float8 training (torchao): fp8 all-gather bytes, which GEMMs run in fp8, the fp8 rate and its refusal.
#include <doctest/doctest.h>

#include "cluster.h"
#include "compute_cost.h"
#include "errors.h"
#include "hardware_catalog.h"
#include "hardware_profile.h"
#include "lowering.h"
#include "model_presets.h"
#include "pass_kernels.h"

using namespace shardplan;

namespace {

StepSchedule llama3_8b_step(const std::string& precision) {
  const ModelSpec model = preset_model("llama3-8b");
  TrainingConfig training;
  training.seq_len = 8192;
  training.precision = precision_recipe(precision);
  const Plan plan = default_plan(model, training, {}, wrap_per_block(model), 8);
  return lower_plan(plan, model, LoweringOptions{8, 8, 0});
}

std::int64_t first_block_gather_bytes(const std::string& precision) {
  const ModelSpec model = preset_model("llama3-8b");
  TrainingConfig training;
  training.seq_len = 8192;
  training.precision = precision_recipe(precision);
  const Plan plan = default_plan(model, training, {}, wrap_per_block(model), 8);
  const StepSchedule schedule = lower_plan(plan, model, LoweringOptions{8, 8, 0});
  for (const Op& op : schedule.ops) {
    if (op.kind == OpKind::all_gather && op.unit == 1) return op.bytes;
  }
  return -1;
}

}  // namespace

// torchao/float8/README.md and fsdp_utils.py (WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather): with
// enable_fsdp_float8_all_gather the weight shard is cast to float8 before the all-gather, which moves 1 byte per element;
// the norms (not Float8Linear) gather in bf16. A Llama 3 8B block: q, o 4096², k, v 1024 × 4096, gate, up, down
// 4096 × 14336, two norms of 4096.
TEST_CASE("fp8: the float8 all-gather moves the blocks' projection weights in 1 byte per element") {
  const std::int64_t projections = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 4096 * 14336;
  const std::int64_t norms = 2 * 4096;
  CHECK(first_block_gather_bytes("bf16-mixed-fp32-reduce") == 2 * (projections + norms));
  CHECK(first_block_gather_bytes("fp8-tensorwise") == projections + 2 * norms);
  // torchao supports the float8 all-gather for tensorwise scaling only: rowwise gathers bf16.
  CHECK(first_block_gather_bytes("fp8-rowwise") == 2 * (projections + norms));
}

TEST_CASE("fp8: blocks' projections run in float8, the output head in bf16, at the GPU's fp8 rate or refused") {
  const ModelSpec model = preset_model("llama3-8b");
  TrainingConfig training;
  training.seq_len = 8192;
  training.precision = precision_recipe("fp8-tensorwise");
  const std::size_t block = 1, head = model.layers.size() - 1;
  const PassKernels forward = pass_kernels(model, block, training, ComputePass::forward, ActivationCheckpointing::none);
  const PassKernels backward = pass_kernels(model, block, training, ComputePass::backward, ActivationCheckpointing::none);
  REQUIRE(forward.gemms.size() == 7);
  for (const GemmCall& gemm : forward.gemms) CHECK(gemm.fp8);
  for (const GemmCall& gemm : backward.gemms) CHECK(gemm.fp8);
  for (const GemmCall& gemm : pass_kernels(model, head, training, ComputePass::forward, ActivationCheckpointing::none).gemms) {
    CHECK_FALSE(gemm.fp8);
  }
  TrainingConfig bf16 = training;
  bf16.precision = precision_recipe("bf16-mixed-fp32-reduce");
  const PassKernels plain = pass_kernels(model, block, bf16, ComputePass::forward, ActivationCheckpointing::none);
  CHECK(forward.gemm_flops() == doctest::Approx(plain.gemm_flops()));  // the same FLOPs, at another rate
  CHECK(forward.memory_bytes > plain.memory_bytes);                      // plus the casts (Note [Float8 casts])

  const HardwareProfile h100 = profile_from_cluster(parse_cluster("8xH100-80GB", HardwareCatalog::builtin()));
  CHECK(h100.peak_fp8_flops == doctest::Approx(2 * h100.peak_bf16_flops).epsilon(0.001));  // datasheet: 1,979 vs 989
  const PassTime fp8_time = pass_time(forward, 2, h100), bf16_time = pass_time(plain, 2, h100);
  CHECK(fp8_time.gemm_s < 0.6 * bf16_time.gemm_s);
  CHECK(fp8_time.gemm_s > 0.45 * bf16_time.gemm_s);
  const HardwareProfile a100 = profile_from_cluster(parse_cluster("8xA100-80GB", HardwareCatalog::builtin()));
  CHECK_THROWS_WITH_AS(pass_time(forward, 2, a100), doctest::Contains("no float8 tensor-core rate for GPU 'A100-80GB'"),
                       InputError);
}

// torchao's precompute_float8_dynamic_scale_for_fsdp (torchao/float8/fsdp_utils.py): after the optimizer step, the
// amax of every float8 weight (torch._foreach_norm, ord inf) stacked and all-reduced once — one fp32 per weight.
TEST_CASE("fp8: the float8 all-gather's amax all-reduce runs once per step after the optimizer") {
  const auto amax_ops = [](const StepSchedule& schedule) {
    std::vector<Op> found;
    for (const Op& op : schedule.ops) {
      if (op.kind == OpKind::all_reduce && op.unit == -1) found.push_back(op);
    }
    return found;
  };
  CHECK(amax_ops(llama3_8b_step("bf16-mixed-fp32-reduce")).empty());
  CHECK(amax_ops(llama3_8b_step("fp8-rowwise")).empty());  // no float8 all-gather, no precomputed scale
  const StepSchedule fp8 = llama3_8b_step("fp8-tensorwise");
  const std::vector<Op> amax = amax_ops(fp8);
  REQUIRE(amax.size() == 1);
  CHECK(amax.front().bytes == 32 * 7 * 4);  // 32 blocks x 7 projections, an fp32 amax each
  CHECK(amax.front().group_size == 8);
  REQUIRE(amax.front().deps.size() == 1);
  CHECK(fp8.ops[static_cast<std::size_t>(amax.front().deps.front())].kind == OpKind::optimizer_step);
}
