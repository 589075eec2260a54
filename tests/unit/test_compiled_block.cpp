// Tests of torch.compile'd blocks (Note [Compiled blocks]): what AOTAutograd's partitioner keeps of a llama block.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "model_presets.h"
#include "model_source.h"
#include "plan.h"
#include "plan_json.h"
#include "unit_layout.h"

using namespace shardplan;

TEST_CASE("compiled llama block: SiLU's output recomputed, the unread down_proj output not kept under selective-op") {
  const ModelSpec model = preset_model("llama3-8b");
  const LayerSpec& block = model.layers[1];
  REQUIRE(block.kind == LayerKind::transformer_block);
  const double h = 4096, q = 4096, kv = 1024, f = 14336, heads = 32;
  // Eager selective-op keeps the block input, q_proj (q), v_proj (kv), gate_proj (f), down_proj (h) outputs and
  // SDPA's output (q); compiled, the down_proj output (read by no backward node) is not saved.
  const double eager_selective = h + q + kv + f + h + q;
  const double lse = 4.0 * heads;
  CHECK(block.activation_bytes_per_token(8192, 2, true, ActivationCheckpointing::selective_op) ==
        doctest::Approx(2.0 * eager_selective + lse));
  CHECK(block.activation_bytes_per_token(8192, 2, true, ActivationCheckpointing::selective_op, true) ==
        doctest::Approx(2.0 * (eager_selective - h) + lse));
  // Without checkpointing the compiled block recomputes silu(gate) (f) from the saved gate output.
  const double eager_none = block.activation_bytes_per_token(8192, 2, true, ActivationCheckpointing::none);
  CHECK(block.activation_bytes_per_token(8192, 2, true, ActivationCheckpointing::none, true) ==
        doctest::Approx(eager_none - 2.0 * f));
  // Full recompute keeps the block input either way.
  CHECK(block.activation_bytes_per_token(8192, 2, true, ActivationCheckpointing::full, true) == doctest::Approx(2.0 * h));
  // Layers outside the blocks are not compiled (torchtitan compiles the TransformerBlocks only).
  const LayerSpec& head = model.layers.back();
  CHECK(head.activation_bytes_per_token(8192, 2, true, ActivationCheckpointing::none, true) ==
        head.activation_bytes_per_token(8192, 2, true, ActivationCheckpointing::none));
}

TEST_CASE("compiled blocks: down_proj's output is read where a norm follows it (Gemma) or it is not saved (Phi-3)") {
  const ModelSpec gemma = load_model("examples/hf/gemma2-2b.json");
  const LayerSpec& gemma_block = gemma.layers[1];
  REQUIRE(gemma_block.kind == LayerKind::transformer_block);
  CHECK(gemma_block.activations.compiled_unread_selective_op_elements_per_token == 0);
  CHECK(gemma_block.activations.compiled_recomputed_elements_per_token == 9216);  // gelu(gate)
  // Phi-3's fused projections: qkv_proj and gate_up_proj are the saved 1st and 3rd matmuls, both read in backward.
  const ModelSpec phi3 = load_model("examples/hf/phi3-mini-4k.json");
  const LayerSpec& phi3_block = phi3.layers[1];
  REQUIRE(phi3_block.kind == LayerKind::transformer_block);
  CHECK(phi3_block.activations.compiled_unread_selective_op_elements_per_token == 0);
  CHECK(phi3_block.activations.compiled_recomputed_elements_per_token == 8192);
}

TEST_CASE("compiled plan: kept activations shrink, the plan JSON carries torch_compile, absent reads eager") {
  const ModelSpec model = preset_model("llama3-8b");
  TrainingConfig training;
  training.seq_len = 4096;
  training.checkpointing = ActivationCheckpointing::selective_op;
  const Plan eager = default_plan(model, training, {}, wrap_per_block(model), 8);
  training.torch_compile = true;
  const Plan compiled = default_plan(model, training, {}, wrap_per_block(model), 8);
  const std::int64_t tokens = 4096;
  CHECK(kept_activation_bytes(model, eager.training, 1, ActivationCheckpointing::selective_op) -
            kept_activation_bytes(model, compiled.training, 1, ActivationCheckpointing::selective_op) ==
        2 * 4096 * tokens);

  nlohmann::json document = to_json(compiled, model);
  CHECK(document["training"]["torch_compile"] == true);
  CHECK(plan_from_json(document, "plan.json", model).training.torch_compile);
  CHECK_FALSE(to_json(eager, model)["training"].contains("torch_compile"));
  document["training"].erase("torch_compile");
  CHECK_FALSE(plan_from_json(document, "plan.json", model).training.torch_compile);
  document["training"]["torch_compile"] = "yes";
  CHECK_THROWS_AS(plan_from_json(document, "plan.json", model), InputError);
}
