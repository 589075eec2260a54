// Tests of the OLMo 2, Granite, GraniteMoE and Phi-3.5-MoE imports (issue 35): exact counts against the released checkpoints'
// stored totals, the module paths and shapes that differ from llama's; and Note [Long context]'s RoPE-scaled reach.
#include <doctest/doctest.h>

#include <string>

#include "decoder_builder.h"
#include "errors.h"
#include "hf_config.h"
#include "hf_example_models.h"
#include "json_input.h"
#include "model_json.h"
#include "model_presets.h"
#include "training.h"

using namespace shardplan;
using shardplan::testing::has_tensor;
using shardplan::testing::hf_model;

TEST_CASE("hf OLMo 2: post-norms only, q/k norms over every head, the released 7B's exact count") {
  // allenai/OLMo-2-1124-7B: 7,298,617,344 parameters, the Hugging Face API's safetensors.total for the checkpoint
  // (F32 7298617344 at revision 7df9a82518afdecae4e8c026b27adccc8c1f0032). 32 blocks of 4·4096² attention,
  // 3·4096·11008 MLP and four RMSNorm(4096) (post_attention_layernorm, post_feedforward_layernorm, q_norm, k_norm
  // over 32 heads of 128 each), the untied 100352 × 4096 embedding and head, the final norm.
  const ModelSpec olmo = hf_model("olmo2-7b");
  CHECK(olmo.param_count() == 7'298'617'344);
  const LayerSpec& block = olmo.layers[1];
  CHECK(block.name == "model.layers.0");
  CHECK(has_tensor(block, "self_attn.q_norm.weight", {4096}));  // RMSNorm(heads · head_dim), not head_dim
  CHECK(has_tensor(block, "self_attn.k_norm.weight", {4096}));
  CHECK(has_tensor(block, "post_attention_layernorm.weight", {4096}));
  CHECK(has_tensor(block, "post_feedforward_layernorm.weight", {4096}));
  CHECK_FALSE(has_tensor(block, "input_layernorm.weight", {4096}));  // Olmo2DecoderLayer deletes it
  CHECK_FALSE(has_tensor(block, "pre_feedforward_layernorm.weight", {4096}));
  CHECK(block.tensors.size() == 11);

  // OLMo-2-1124-13B (5120 wide, 40 blocks, 13824-wide MLP): 13,716,198,400, safetensors.total at revision
  // 3fefddc1bf18a30e1d9b91000271630718f2aa8b.
  auto document = read_json_file("examples/hf/olmo2-7b.json");
  document["hidden_size"] = 5120;
  document["intermediate_size"] = 13824;
  document["num_hidden_layers"] = 40;
  document["num_attention_heads"] = 40;
  document["num_key_value_heads"] = 40;
  CHECK(build_decoder("olmo2-13b", architecture_from_hf_config(document, "olmo2-13b"), "olmo2-13b").param_count() ==
        13'716'198'400);

  // With grouped kv heads k_norm spans the kv width only.
  document["num_key_value_heads"] = 8;
  const ModelSpec grouped = build_decoder("g", architecture_from_hf_config(document, "g"), "g");
  CHECK(has_tensor(grouped.layers[1], "self_attn.k_norm.weight", {8 * 128}));
}

TEST_CASE("hf Granite: llama's tensors and count; the multipliers change none; mlp_bias and attention_bias count") {
  // ibm-granite/granite-3.1-2b-instruct (the base's shape): 2,533,531,648 parameters in the Hugging Face API's
  // safetensors totals. 40 blocks of 2048² q and o, 2 · 512 · 2048 k and v, 3 · 2048 · 8192 MLP, two norms; the tied
  // 49155 × 2048 embedding; the final norm.
  const ModelSpec granite = hf_model("granite-3.1-2b");
  CHECK(granite.param_count() == 2'533'531'648);
  CHECK(granite.layers.back().tied_to_layer == std::optional<std::size_t>(0));
  CHECK(has_tensor(granite.layers[1], "mlp.gate_proj.weight", {8192, 2048}));

  auto document = read_json_file("examples/hf/granite-3.1-2b.json");
  document["residual_multiplier"] = -1.0;  // read for its range: a malformed value is refused
  CHECK_THROWS_AS(architecture_from_hf_config(document, "g.json"), InputError);
  document["residual_multiplier"] = 0.22;
  // Granite Code's biases: attention_bias on q, k, v and o (GraniteAttention), mlp_bias on gate, up, down.
  document["attention_bias"] = true;
  document["mlp_bias"] = true;
  const ModelSpec biased = build_decoder("g", architecture_from_hf_config(document, "g.json"), "g.json");
  const std::int64_t per_block = (2048 + 512 + 512 + 2048) + (8192 + 8192 + 2048);
  CHECK(biased.param_count() == 2'533'531'648 + 40 * per_block);
  CHECK(has_tensor(biased.layers[1], "self_attn.o_proj.bias", {2048}));
  CHECK(has_tensor(biased.layers[1], "mlp.down_proj.bias", {2048}));
}

TEST_CASE("hf GraniteMoE: stacked experts, the released 1B-A400M's and 3B-A800M's exact counts") {
  // ibm-granite/granite-3.0-1b-a400m: 1,334,628,352 parameters (sum of numel of the loaded model). 24 blocks of
  // 1024² q and o, 2 · 512 · 1024 k and v, 32 experts of 3 · 512 · 1024 stacked in input_linear [32, 1024, 1024]
  // and output_linear [32, 1024, 512], router.layer [32, 1024], two norms; the tied 49155 × 1024 embedding.
  const ModelSpec moe = hf_model("granite-3.0-1b-a400m");
  CHECK(moe.param_count() == 1'334'628'352);
  const LayerSpec& block = moe.layers[1];
  CHECK(has_tensor(block, "block_sparse_moe.input_linear.weight", {32, 2 * 512, 1024}));
  CHECK(has_tensor(block, "block_sparse_moe.output_linear.weight", {32, 1024, 512}));
  CHECK(has_tensor(block, "block_sparse_moe.router.layer.weight", {32, 1024}));
  REQUIRE(block.moe);
  CHECK(block.moe->num_experts == 32);
  CHECK(block.moe->experts_per_token == 8);
  CHECK(block.moe->routed_expert_elements == 32 * 3 * 512 * 1024);
  // The kernels count every routed slot's gate and up in one GEMM per expert, as GraniteMoeParallelExperts runs.
  REQUIRE(block.kernels);
  bool has_input_linear = false;
  for (const auto& projection : block.kernels->projections) {
    if (projection.name == "block_sparse_moe.input_linear") {
      has_input_linear = true;
      CHECK(projection.out_features == 8 * 2 * 512);
    }
  }
  CHECK(has_input_linear);

  // granite-3.0-3b-a800m's shape (1536 wide, 32 blocks, 24 heads, 40 experts top-8): 3,298,793,472, the stored
  // total of ibm-granite/granite-guardian-3.2-3b-a800m, which shares it.
  auto document = read_json_file("examples/hf/granite-3.0-1b-a400m.json");
  document["hidden_size"] = 1536;
  document["num_hidden_layers"] = 32;
  document["num_attention_heads"] = 24;
  document["num_local_experts"] = 40;
  CHECK(build_decoder("g", architecture_from_hf_config(document, "g"), "g").param_count() == 3'298'793'472);
}

TEST_CASE("hf Phi-3.5-MoE: LayerNorms with biases, biased attention and head, Mixtral's experts, the exact count") {
  // microsoft/Phi-3.5-MoE-instruct: 41,873,153,344 parameters, of which 40,267,415,552 in the MoE blocks (16 experts
  // of 3 · 6400 · 4096 and a 16 × 4096 router in each of 32 layers): the totals the model's release discussion
  // reports. 32 blocks of q and o 4096² + bias 4096 each, k and v 1024 · 4096 + bias 1024 each, two LayerNorms of
  // weight and bias; the untied 32064 × 4096 embedding, the head with its 32064 bias; the final LayerNorm.
  const ModelSpec phimoe = hf_model("phi3.5-moe");
  CHECK(phimoe.param_count() == 41'873'153'344);
  std::int64_t moe_elements = 0;
  for (const LayerSpec& layer : phimoe.layers) {
    for (const TensorSpec& tensor : layer.tensors) {
      if (tensor.name.starts_with("block_sparse_moe.")) moe_elements += tensor.element_count();
    }
  }
  CHECK(moe_elements == 40'267'415'552);
  const LayerSpec& block = phimoe.layers[1];
  CHECK(has_tensor(block, "input_layernorm.bias", {4096}));
  CHECK(has_tensor(block, "post_attention_layernorm.bias", {4096}));
  CHECK(has_tensor(block, "self_attn.o_proj.bias", {4096}));
  CHECK(has_tensor(block, "self_attn.k_proj.bias", {1024}));
  CHECK(has_tensor(block, "block_sparse_moe.experts.15.w2.weight", {4096, 6400}));
  CHECK(has_tensor(phimoe.layers.back(), "bias", {32064}));
  CHECK(has_tensor(phimoe.layers[phimoe.layers.size() - 2], "bias", {4096}));  // model.norm is a LayerNorm
  REQUIRE(block.kernels);
  CHECK(block.kernels->elementwise.front().name == "layernorm");

  // transformers' own class name reads the same; a tied head cannot carry the bias here.
  auto document = read_json_file("examples/hf/phi3.5-moe.json");
  document["architectures"] = nlohmann::json::array({"PhimoeForCausalLM"});
  CHECK(build_decoder("p", architecture_from_hf_config(document, "p"), "p").param_count() == 41'873'153'344);
  document["tie_word_embeddings"] = true;
  CHECK_THROWS_AS(architecture_from_hf_config(document, "p"), InputError);
}

TEST_CASE("hf: a config's RoPE scaling lets --seq-len pass max_position_embeddings (Note [Long context])") {
  auto document = read_json_file("examples/hf/qwen2-0.5b.json");
  const std::int64_t positions = document.at("max_position_embeddings");
  TrainingConfig training;
  training.micro_batch = 1;
  training.global_batch = 1;
  training.seq_len = 4 * positions;
  const auto model_of = [](const nlohmann::json& config) {
    return build_decoder("q", architecture_from_hf_config(config, "q.json"), "q.json");
  };
  // No scaling: refused, naming the limit and how to pass it.
  const ModelSpec plain = model_of(document);
  std::string message;
  try {
    validate_training(training, plain);
  } catch (const InputError& error) {
    message = error.what();
  }
  CHECK(message.find("--seq-len " + std::to_string(4 * positions) + ": expected at most the model's " +
                     std::to_string(positions) + " positions") != std::string::npos);
  CHECK(message.find("rope_scaling") != std::string::npos);

  // Qwen2.5's YaRN recipe (its model cards): factor 4 over the original positions reaches 4×.
  document["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", positions}};
  const ModelSpec yarn = model_of(document);
  CHECK(yarn.architecture->rope_scaled_positions == 4 * positions);
  CHECK_NOTHROW(validate_training(training, yarn));
  training.seq_len = 4 * positions + 1;
  CHECK_THROWS_AS(validate_training(training, yarn), InputError);

  // transformers v5 names it rope_parameters; a factor without original positions scales max_position_embeddings
  // (dynamic NTK and YaRN take it for the original), except linear interpolation's, whose configs publish the
  // interpolated length there (Note [Long context]): linear reaches further only from a named original.
  document.erase("rope_scaling");
  document["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  CHECK(model_of(document).architecture->rope_scaled_positions == 2 * positions);
  document["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  CHECK(model_of(document).architecture->rope_scaled_positions == 0);
  document["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"original_max_position_embeddings", 1024}};
  CHECK(model_of(document).architecture->rope_scaled_positions == 2048);
  // "default" and a scaling without a factor (Phi-3's longrope lists) name nothing further.
  document["rope_parameters"] = {{"rope_type", "default"}, {"factor", 8.0}};
  CHECK(model_of(document).architecture->rope_scaled_positions == 0);
  document["rope_parameters"] = {{"rope_type", "longrope"}, {"short_factor", nlohmann::json::array({1.0})}};
  CHECK(model_of(document).architecture->rope_scaled_positions == 0);
  document["rope_parameters"] = {{"rope_type", "linear"}, {"factor", -2.0}};
  CHECK_THROWS_AS(model_of(document), InputError);

  // Gemma 3 4B's text_config: linear factor 8 on the global layers, max_position_embeddings Gemma3TextConfig's
  // default 131072 — its 128K context already, not 8 × 131072 (Note [Long context]).
  nlohmann::json gemma3 = read_json_file("examples/hf/gemma3-4b-it.json").at("text_config");
  gemma3.update({{"architectures", {"Gemma3ForCausalLM"}}, {"vocab_size", 262208}, {"num_attention_heads", 8},
                 {"num_key_value_heads", 4}, {"head_dim", 256}});  // Gemma3TextConfig's defaults the release omits
  const ModelSpec gemma = model_of(gemma3);
  CHECK(gemma.architecture->max_trainable_positions() == 131072);
  training.seq_len = 131072;
  CHECK_NOTHROW(validate_training(training, gemma));
  training.seq_len = 131073;
  CHECK_THROWS_AS(validate_training(training, gemma), InputError);
  // The multimodal model keeps no architecture (its vision tower is spliced in) but keeps its decoder's bound, as
  // does Llama 4 Scout (its text_config's max_position_embeddings 262,144, past its llama3 scaling's 8 × 8192), and
  // a written model.
  for (const std::string name : {"gemma3-4b-it", "llama4-scout-17b-16e"}) {
    CAPTURE(name);
    const ModelSpec spliced =
        model_from_document(read_json_file("examples/hf/" + name + ".json"), name, "config.json");
    REQUIRE_FALSE(spliced.architecture);
    const std::int64_t bound = name == "gemma3-4b-it" ? 131'072 : 262'144;
    CHECK(spliced.max_trainable_positions() == bound);
    CHECK(model_from_json(to_json(spliced), "written.json").max_trainable_positions() == bound);
    training.seq_len = bound;
    CHECK_NOTHROW(validate_training(training, spliced));
    training.seq_len = bound + 1;
    CHECK_THROWS_WITH_AS(validate_training(training, spliced),
                         ("--seq-len " + std::to_string(bound + 1) + ": expected at most the model's " +
                          std::to_string(bound) + " positions (its decoder's, with any RoPE scaling)")
                             .c_str(),
                         InputError);
  }

  // Llama 3.1's llama3 scaling names 8 × 8192 = 65536, which its 131072 positions already exceed: the limit stays.
  const ModelSpec llama31 = hf_model("llama3.1-405b");
  CHECK(llama31.architecture->max_trainable_positions() == 131072);
}
