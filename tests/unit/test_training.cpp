// Tests of the training configuration, precision recipes, optimizers and strategy parsing.
#include <doctest/doctest.h>

#include "errors.h"
#include "model_presets.h"
#include "precision.h"
#include "sharding.h"
#include "training.h"

using namespace shardplan;

TEST_CASE("training: gradient accumulation steps from the global batch") {
  TrainingConfig training;
  training.micro_batch = 2;
  training.global_batch = 0;
  CHECK(training.grad_accumulation_steps(8) == 1);
  training.global_batch = 64;
  CHECK(training.grad_accumulation_steps(8) == 4);
  training.global_batch = 60;
  CHECK_THROWS_WITH_AS(training.grad_accumulation_steps(8), doctest::Contains("multiple of"), InputError);
}

TEST_CASE("training: validation names the flag") {
  const ModelSpec model = preset_model("gpt2");
  TrainingConfig training;
  training.seq_len = 1024;
  CHECK_NOTHROW(validate_training(training, model));
  training.seq_len = 2048;  // beyond GPT-2's 1024 positions
  CHECK_THROWS_WITH_AS(validate_training(training, model), doctest::Contains("--seq-len"), InputError);
  training.seq_len = 1024;
  training.micro_batch = 0;
  CHECK_THROWS_WITH_AS(validate_training(training, model), doctest::Contains("--micro-batch"), InputError);
  CHECK_THROWS_WITH_AS(checkpointing_from_string("ful"), doctest::Contains("'full'"), InputError);
  CHECK(checkpointing_from_string("selective") == ActivationCheckpointing::selective);
  CHECK(checkpointing_from_string("attention-core") == ActivationCheckpointing::selective);
  CHECK(checkpointing_from_string("selective-op") == ActivationCheckpointing::selective_op);
  CHECK(std::string(to_string(ActivationCheckpointing::selective_op)) == "selective-op");
  CHECK_THROWS_WITH_AS(checkpointing_from_string("selective_op"), doctest::Contains("'selective-op'"), InputError);
  CHECK(attention_kernel_from_string("triton") == AttentionKernel::triton);
  CHECK_THROWS_WITH_AS(attention_kernel_from_string("flash3"), doctest::Contains("'flash'"), InputError);
}

TEST_CASE("training: precision recipes and the ZeRO K") {
  CHECK(optimizer_bytes_per_param(precision_recipe("zero-fp16"), OptimizerKind::adamw) == 12);  // ZeRO §3.1
  CHECK(optimizer_bytes_per_param(precision_recipe("bf16-mixed"), OptimizerKind::adamw) == 8);
  CHECK(optimizer_bytes_per_param(precision_recipe("fp32"), OptimizerKind::sgd_momentum) == 4);
  CHECK(optimizer_bytes_per_param(precision_recipe("fp32"), OptimizerKind::sgd) == 0);
  CHECK(optimizer_bytes_per_param(precision_recipe("pure-bf16"), OptimizerKind::adamw) == 4);
  const PrecisionRecipe mixed = precision_recipe("bf16-mixed");
  CHECK(mixed.param_storage_bytes == 4);
  CHECK(mixed.param_compute_bytes == 2);
  CHECK(mixed.grad_storage_bytes == 4);
  CHECK_THROWS_WITH_AS(precision_recipe("bf16"), doctest::Contains("bf16-mixed"), InputError);
  CHECK_THROWS_AS(optimizer_from_string("lion"), InputError);
}

TEST_CASE("training: strategies resolve to shard groups") {
  auto layout = resolve_sharding(parse_strategy("full_shard"), 16, 8);
  CHECK(layout.param_group == 16);
  CHECK(layout.reshard_after_forward);
  layout = resolve_sharding(parse_strategy("shard_grad_op"), 16, 8);
  CHECK_FALSE(layout.reshard_after_forward);
  layout = resolve_sharding(parse_strategy("hybrid_shard"), 16, 8);
  CHECK(layout.param_group == 8);
  CHECK(layout.replicas == 2);
  layout = resolve_sharding(parse_strategy("hybrid_shard_zero2:4"), 16, 8);
  CHECK(layout.param_group == 4);
  CHECK_FALSE(layout.reshard_after_forward);
  layout = resolve_sharding(parse_strategy("zero2"), 16, 8);
  CHECK(layout.param_group == 1);
  CHECK(layout.grad_group == 16);
  CHECK(layout.optimizer_group == 16);
  layout = resolve_sharding(parse_strategy("zero1"), 16, 8);
  CHECK(layout.grad_group == 1);
  CHECK(layout.optimizer_group == 16);
  CHECK_THROWS_WITH_AS(resolve_sharding(parse_strategy("hybrid_shard:3"), 16, 8), doctest::Contains("divide"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse_strategy("full_shrd"), doctest::Contains("'full_shard'"), InputError);
  CHECK_THROWS_AS(parse_strategy("full_shard:2"), InputError);
  CHECK_THROWS_AS(parse_strategy("hybrid_shard:x"), InputError);
  CHECK_THROWS_AS(resolve_sharding(parse_strategy("full_shard"), 0, 8), InputError);
}
