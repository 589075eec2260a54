// Tests of the Qwen2-VL and Qwen2.5-VL imports (issue 35): exact counts against the released checkpoints' stored
// totals, the vision tower's module names and shapes, the tokens each part runs on, Qwen2.5-VL's windowed vision
// blocks, and the one-line refusals.
#include <doctest/doctest.h>

#include <string>

#include "errors.h"
#include "hf_example_models.h"
#include "json_input.h"
#include "model_source.h"
#include "pass_kernels.h"
#include "training.h"

using namespace shardplan;
using namespace shardplan::testing;

namespace {

const std::string kQwen25Vl7b = "examples/hf/qwen2.5-vl-7b-instruct.json";

// Qwen/Qwen2-VL-7B-Instruct's config.json: the Qwen2-7B-shaped text keys at the top level and its vision_config
// (depth 32, embed_dim 1280, mlp_ratio 4, num_heads 16, in_chans 3, hidden_size 3584, patch 14, merge 2, temporal
// 2). Shape keys only; the rest (token ids, rope_theta) changes no tensor.
nlohmann::json qwen2_vl_7b() {
  return {{"architectures", {"Qwen2VLForConditionalGeneration"}},
          {"model_type", "qwen2_vl"},
          {"hidden_size", 3584},
          {"intermediate_size", 18944},
          {"max_position_embeddings", 32768},
          {"max_window_layers", 28},
          {"num_attention_heads", 28},
          {"num_hidden_layers", 28},
          {"num_key_value_heads", 4},
          {"sliding_window", 32768},
          {"tie_word_embeddings", false},
          {"use_sliding_window", false},
          {"vocab_size", 152064},
          {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {16, 24, 24}}}},
          {"vision_config",
           {{"depth", 32}, {"embed_dim", 1280}, {"mlp_ratio", 4}, {"num_heads", 16}, {"in_chans", 3},
            {"hidden_size", 3584}, {"patch_size", 14}, {"spatial_merge_size", 2}, {"spatial_patch_size", 14},
            {"temporal_patch_size", 2}}}};
}

}  // namespace

TEST_CASE("hf Qwen2.5-VL: vision transformer, patch merger, Qwen2 text, the released 7B's and 3B's exact counts") {
  // Qwen/Qwen2.5-VL-7B-Instruct: 8,292,166,656 parameters (the Hub's numParameters; model.safetensors.index.json's
  // total_size 16,584,333,312 bytes in bf16): the text model 7,615,616,512 (Qwen2-7B's shape, untied) and the vision
  // tower 676,550,144 (a public freeze script prints both halves of the loaded model).
  const ModelSpec vl = load_model(kQwen25Vl7b);
  CHECK(vl.param_count() == 8'292'166'656);
  CHECK(params_under(vl, "visual.") == 676'550'144);
  CHECK(vl.param_count() - params_under(vl, "visual.") == 7'615'616'512);
  CHECK(vl.layers[0].name == "model.embed_tokens");
  CHECK(vl.layers[1].name == "visual.patch_embed");
  CHECK(vl.layers[2].name == "visual.blocks.0");
  CHECK(vl.layers[34].name == "visual.merger");
  CHECK(vl.layers[35].name == "model.layers.0");
  CHECK(vl.layers.back().name == "lm_head");
  CHECK(has_tensor(vl.layers[1], "proj.weight", {1280, 3, 2, 14, 14}));  // Conv3d, no bias
  const LayerSpec& block = vl.layers[2];
  CHECK(has_tensor(block, "norm1.weight", {1280}));  // Qwen2RMSNorm: no bias
  CHECK_FALSE(has_tensor(block, "norm1.bias", {1280}));
  CHECK(has_tensor(block, "attn.qkv.weight", {3840, 1280}));
  CHECK(has_tensor(block, "attn.qkv.bias", {3840}));
  CHECK(has_tensor(block, "mlp.gate_proj.weight", {3420, 1280}));
  CHECK(has_tensor(block, "mlp.down_proj.bias", {1280}));
  const LayerSpec& merger = layer_named(vl, "visual.merger");
  CHECK(has_tensor(merger, "mlp.0.weight", {5120, 5120}));
  CHECK(has_tensor(merger, "mlp.2.weight", {3584, 5120}));
  // Note [Qwen2-VL image]: one 448 × 448 image a sample — 32 × 32 patches in the tower, 16 × 16 merged tokens.
  CHECK(block.tokens_per_sample(8192) == 1024);
  CHECK(merger.tokens_per_sample(8192) == 256);
  CHECK(vl.layers[35].tokens_per_sample(8192) == 8192);

  // Qwen/Qwen2.5-VL-3B-Instruct (2048 wide, 36 layers, 16 heads over 2, 11008-wide MLP, tied, vocab 151936, the
  // merger to 2048): 3,754,622,976, the Hub's count (n_parameters in public model registries).
  auto document = read_json_file(kQwen25Vl7b);
  document["hidden_size"] = 2048;
  document["intermediate_size"] = 11008;
  document["num_hidden_layers"] = 36;
  document["num_attention_heads"] = 16;
  document["num_key_value_heads"] = 2;
  document["tie_word_embeddings"] = true;
  document["vocab_size"] = 151936;
  document["vision_config"]["out_hidden_size"] = 2048;
  const ModelSpec small = config_model(document);
  CHECK(small.param_count() == 3'754'622'976);
  CHECK(small.layers.back().tied_to_layer == std::optional<std::size_t>(0));

  // transformers >= 4.52 re-saves the text keys under text_config: the same model.
  auto nested = read_json_file(kQwen25Vl7b);
  nlohmann::json text = nested;
  text.erase("vision_config");
  text["model_type"] = "qwen2_5_vl_text";
  nested["text_config"] = text;
  nested["hidden_size"] = 1;  // the top level's keys are not read when text_config is there
  CHECK(config_model(nested).param_count() == 8'292'166'656);
}

TEST_CASE("hf Qwen2.5-VL: windowed vision blocks attend within 64 patches, fullatt_block_indexes over the image") {
  const ModelSpec vl = load_model(kQwen25Vl7b);
  // window_size 112 px = 8 × 8 patches of 14 px; blocks 7, 15, 23 and 31 attend over all 1024.
  for (int index = 0; index < 32; ++index) {
    CAPTURE(index);
    const LayerSpec& block = layer_named(vl, "visual.blocks." + std::to_string(index));
    const bool full = index % 8 == 7;
    CHECK(block.flops.attention_window == (full ? 0 : 64));
    CHECK_FALSE(block.flops.causal_attention);
  }
  // Flash (varlen over the windows): 16 windows of 64² scores instead of 1024², a sixteenth.
  const LayerSpec& windowed = layer_named(vl, "visual.blocks.0");
  const LayerSpec& full = layer_named(vl, "visual.blocks.7");
  const double per_position = 4.0 * 1280;
  CHECK(windowed.forward_flops_per_token(8192, true) ==
        doctest::Approx(windowed.flops.matmul_flops_per_token + per_position * 64));
  CHECK(full.forward_flops_per_token(8192, true) ==
        doctest::Approx(full.flops.matmul_flops_per_token + per_position * 1024));
  TrainingConfig training;
  training.seq_len = 8192;
  training.micro_batch = 1;
  const auto attention = [&](const std::string& name) {
    for (std::size_t i = 0; i < vl.layers.size(); ++i) {
      if (vl.layers[i].name == name) {
        return pass_kernels(vl, i, training, ComputePass::forward, ActivationCheckpointing::none).attention_flops();
      }
    }
    return -1.0;
  };
  CHECK(attention("visual.blocks.0") * 16 == doctest::Approx(attention("visual.blocks.7")));
}

TEST_CASE("hf Qwen2-VL: LayerNorms, a quick_gelu MLP of embed_dim × mlp_ratio, the released 7B's exact count") {
  // Qwen/Qwen2-VL-7B-Instruct: 8,291,375,616 parameters (model.safetensors.index.json's total_size 16,582,751,232
  // bytes in bf16; the same count in public model-size tables): the Qwen2-7B-shaped text 7,615,616,512 and the
  // tower 675,759,104.
  const ModelSpec vl = config_model(qwen2_vl_7b());
  CHECK(vl.param_count() == 8'291'375'616);
  CHECK(params_under(vl, "visual.") == 675'759'104);
  const LayerSpec& block = layer_named(vl, "visual.blocks.0");
  CHECK(has_tensor(block, "norm1.bias", {1280}));
  CHECK(has_tensor(block, "mlp.fc1.weight", {5120, 1280}));
  CHECK(has_tensor(block, "mlp.fc2.weight", {1280, 5120}));
  CHECK(block.flops.attention_window == 0);  // every block attends over the image
  CHECK(has_tensor(layer_named(vl, "visual.merger"), "ln_q.bias", {1280}));
}

TEST_CASE("hf Qwen2-VL: a merger that does not reach the text width, or a bad block index, is refused in one line") {
  auto document = qwen2_vl_7b();
  document["vision_config"]["hidden_size"] = 4096;
  CHECK_THROWS_WITH_AS(config_model(document), doctest::Contains("field 'vision_config.hidden_size'"), InputError);
  auto v25 = read_json_file(kQwen25Vl7b);
  v25["vision_config"]["fullatt_block_indexes"] = {7, 32};
  CHECK_THROWS_WITH_AS(config_model(v25), doctest::Contains("field 'vision_config.fullatt_block_indexes'"),
                       InputError);
}
