// Tests of the Hugging Face config.json import: exact parameter counts of the shipped configs, field mapping, errors.
#include <doctest/doctest.h>

#include "test_support.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "decoder_builder.h"
#include "errors.h"
#include "hf_config.h"
#include "json_input.h"
#include "hf_example_models.h"

namespace {

using shardplan::DecoderArchitecture;
using shardplan::InputError;

// Tests run from the repository root (meson's workdir), so the shipped examples are reachable by relative path.
DecoderArchitecture load_architecture(const std::string& name) {
  const std::string path = "examples/hf/" + name + ".json";
  return shardplan::architecture_from_hf_config(shardplan::read_json_file(path), path);
}

std::int64_t param_count_of(const std::string& name) {
  return shardplan::build_decoder(name, load_architecture(name), "examples/hf/" + name + ".json").param_count();
}

using shardplan::testing::input_error_message;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A minimal llama config to mutate, so each error test changes exactly one field.
nlohmann::json small_llama() {
  return nlohmann::json{{"architectures", nlohmann::json::array({"LlamaForCausalLM"})},
                        {"model_type", "llama"},
                        {"vocab_size", 1000},
                        {"hidden_size", 64},
                        {"intermediate_size", 176},
                        {"num_hidden_layers", 2},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2}};
}

// A file that exists for the test's duration; the name is unique per process and per instance.
class TemporaryFile {
 public:
  explicit TemporaryFile(const std::string& contents) {
    static std::atomic<int> counter{0};
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = std::filesystem::temp_directory_path() /
            ("shardplan_hf_" + std::to_string(stamp) + "_" + std::to_string(counter++) + ".json");
    std::ofstream(path_) << contents;
  }
  ~TemporaryFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace

TEST_CASE("hf: shipped configs build models with the published exact parameter counts") {
  // Counts of the Hugging Face checkpoints (sum of every tensor's numel, tied weights counted once).
  CHECK(param_count_of("llama2-7b") == 6'738'415'616);
  CHECK(param_count_of("llama2-13b") == 13'015'864'320);
  CHECK(param_count_of("llama2-70b") == 68'976'648'192);
  CHECK(param_count_of("llama3-8b") == 8'030'261'248);
  CHECK(param_count_of("llama3-70b") == 70'553'706'496);
  CHECK(param_count_of("llama3.1-405b") == 405'853'388'800);
  CHECK(param_count_of("gpt2") == 124'439'808);
  CHECK(param_count_of("mistral-7b") == 7'241'732'096);
  CHECK(param_count_of("qwen2-0.5b") == 494'032'768);
}

TEST_CASE("hf: llama fields map onto the architecture, grouped-query attention included") {
  const auto llama3 = load_architecture("llama3-8b");
  CHECK(llama3.family == DecoderArchitecture::Family::llama);
  CHECK(llama3.vocab_size == 128256);
  CHECK(llama3.hidden_size == 4096);
  CHECK(llama3.intermediate_size == 14336);
  CHECK(llama3.num_layers == 32);
  CHECK(llama3.num_heads == 32);
  CHECK(llama3.num_kv_heads == 8);
  CHECK(llama3.kv_dim() == 1024);
  CHECK(llama3.max_position_embeddings == 8192);
  CHECK_FALSE(llama3.tie_word_embeddings);
  CHECK_FALSE(llama3.attention_bias);
  CHECK(llama3.dropout == 0.0);

  const auto llama2 = load_architecture("llama2-7b");
  CHECK(llama2.num_kv_heads == llama2.num_heads);
  CHECK(load_architecture("llama2-70b").num_kv_heads == 8);
  CHECK(load_architecture("llama3.1-405b").max_position_embeddings == 131072);
}

TEST_CASE("hf: qwen2 has tied embeddings and q/k/v biases; mistral has neither") {
  const auto qwen = load_architecture("qwen2-0.5b");
  CHECK(qwen.family == DecoderArchitecture::Family::llama);
  CHECK(qwen.tie_word_embeddings);
  CHECK(qwen.attention_bias);
  CHECK(qwen.num_kv_heads == 2);

  const auto mistral = load_architecture("mistral-7b");
  CHECK_FALSE(mistral.tie_word_embeddings);
  CHECK_FALSE(mistral.attention_bias);
  CHECK(mistral.num_kv_heads == 8);
  CHECK(mistral.max_position_embeddings == 32768);
}

TEST_CASE("hf: gpt2 fields map with GPT-2's own names and defaults") {
  const auto gpt2 = load_architecture("gpt2");
  CHECK(gpt2.family == DecoderArchitecture::Family::gpt2);
  CHECK(gpt2.vocab_size == 50257);
  CHECK(gpt2.hidden_size == 768);
  CHECK(gpt2.intermediate_size == 4 * 768);  // n_inner null
  CHECK(gpt2.num_layers == 12);
  CHECK(gpt2.num_heads == 12);
  CHECK(gpt2.num_kv_heads == 12);
  CHECK(gpt2.max_position_embeddings == 1024);
  CHECK(gpt2.tie_word_embeddings);  // absent from the file: GPT-2 ties by default
  CHECK(gpt2.dropout == doctest::Approx(0.1));

  auto document = shardplan::read_json_file("examples/hf/gpt2.json");
  document["n_inner"] = 1000;
  document.erase("resid_pdrop");
  document["tie_word_embeddings"] = false;
  const auto changed = shardplan::architecture_from_hf_config(document, "gpt2-variant.json");
  CHECK(changed.intermediate_size == 1000);
  CHECK(changed.dropout == doctest::Approx(0.1));  // resid_pdrop's default
  CHECK_FALSE(changed.tie_word_embeddings);
}

TEST_CASE("hf: defaults for absent or null optional llama keys") {
  auto document = small_llama();
  document.erase("num_key_value_heads");
  auto arch = shardplan::architecture_from_hf_config(document, "config.json");
  CHECK(arch.num_kv_heads == 4);
  CHECK(arch.max_position_embeddings == 2048);
  CHECK_FALSE(arch.tie_word_embeddings);
  CHECK_FALSE(arch.attention_bias);

  document["num_key_value_heads"] = nullptr;
  CHECK(shardplan::architecture_from_hf_config(document, "config.json").num_kv_heads == 4);

  document["attention_bias"] = true;  // LlamaConfig's own key is honoured
  document["head_dim"] = 16;          // consistent with 64 / 4, so accepted
  CHECK(shardplan::architecture_from_hf_config(document, "config.json").attention_bias);
}

TEST_CASE("hf: model_type is the fallback when architectures is absent or null") {
  auto document = small_llama();
  document.erase("architectures");
  document["model_type"] = "qwen2";
  CHECK(shardplan::architecture_from_hf_config(document, "config.json").attention_bias);

  document["architectures"] = nullptr;
  document["model_type"] = "mistral";
  CHECK_FALSE(shardplan::architecture_from_hf_config(document, "config.json").attention_bias);

  document["model_type"] = "bert";
  const auto message =
      input_error_message([&] { shardplan::architecture_from_hf_config(document, "config.json"); });
  CHECK(contains(message, "config.json: field 'model_type'"));
  CHECK(contains(message, "'bert'"));
  CHECK(contains(message, "llama, mistral, qwen2, gpt2, mixtral, qwen2_moe, qwen3, qwen3_moe, phi3, gemma2, gemma3_text, "
                          "deepseek_v2, deepseek_v3, gpt_neox, olmo2, granite, granitemoe, phimoe, starcoder2, "
                          "falcon, cohere, internlm2, gpt_oss, vit, clip_vision_model, siglip_vision_model, llava, "
                          "gemma3"));
}

TEST_CASE("hf: unsupported architecture names the field and lists the supported ones") {
  auto document = small_llama();
  document["architectures"] = nlohmann::json::array({"BertForMaskedLM"});
  const auto message = input_error_message([&] { shardplan::architecture_from_hf_config(document, "bert.json"); });
  CHECK(contains(message, "bert.json: field 'architectures': unsupported architecture 'BertForMaskedLM'"));
  CHECK(contains(message, "(supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel, "
                          "MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                          "Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, DeepseekV2ForCausalLM, "
                          "DeepseekV3ForCausalLM, GPTNeoXForCausalLM, Olmo2ForCausalLM, GraniteForCausalLM, "
                          "GraniteMoeForCausalLM, PhimoeForCausalLM, PhiMoEForCausalLM, Starcoder2ForCausalLM, "
                          "FalconForCausalLM, CohereForCausalLM, InternLM2ForCausalLM, GptOssForCausalLM, ViTModel, "
                          "ViTForImageClassification, "
                          "CLIPVisionModel, SiglipVisionModel, LlavaForConditionalGeneration, "
                          "Gemma3ForConditionalGeneration, Qwen2VLForConditionalGeneration, "
                          "Qwen2_5_VLForConditionalGeneration, Llama4ForConditionalGeneration, "
                          "Llama4ForCausalLM)"));

  // A llama body with another head is a different model, not silently a causal LM.
  document["architectures"] = nlohmann::json::array({"LlamaForSequenceClassification"});
  CHECK(contains(input_error_message([&] { shardplan::architecture_from_hf_config(document, "c.json"); }),
                 "unsupported architecture 'LlamaForSequenceClassification'"));

  document["architectures"] = "LlamaForCausalLM";  // a string, not an array
  CHECK(contains(input_error_message([&] { shardplan::architecture_from_hf_config(document, "c.json"); }),
                 "field 'architectures'"));
  document["architectures"] = nlohmann::json::array();
  CHECK(contains(input_error_message([&] { shardplan::architecture_from_hf_config(document, "c.json"); }),
                 "field 'architectures'"));
}

TEST_CASE("hf: missing, negative and non-integer fields are rejected by name") {
  auto missing = small_llama();
  missing.erase("hidden_size");
  const auto message =
      input_error_message([&] { shardplan::architecture_from_hf_config(missing, "models/bad/config.json"); });
  CHECK(contains(message, "models/bad/config.json"));
  CHECK(contains(message, "'hidden_size'"));

  auto negative = small_llama();
  negative["num_hidden_layers"] = -3;
  const auto negative_message =
      input_error_message([&] { shardplan::architecture_from_hf_config(negative, "config.json"); });
  CHECK(contains(negative_message, "'num_hidden_layers'"));
  CHECK(contains(negative_message, "-3"));

  auto fractional = small_llama();
  fractional["intermediate_size"] = 176.5;
  CHECK(contains(input_error_message([&] { shardplan::architecture_from_hf_config(fractional, "config.json"); }),
                 "'intermediate_size'"));

  auto text_heads = small_llama();
  text_heads["num_key_value_heads"] = "2";
  CHECK(contains(input_error_message([&] { shardplan::architecture_from_hf_config(text_heads, "config.json"); }),
                 "'num_key_value_heads'"));

  auto gpt2 = shardplan::read_json_file("examples/hf/gpt2.json");
  gpt2.erase("n_embd");
  CHECK(contains(input_error_message([&] { shardplan::architecture_from_hf_config(gpt2, "gpt2.json"); }),
                 "'n_embd'"));

  CHECK(contains(input_error_message([] { shardplan::architecture_from_hf_config(nlohmann::json::array(), "x.json"); }),
                 "x.json"));
}

TEST_CASE("hf: keys that would change the parameter count in inexpressible ways are refused") {
  // A head_dim apart from hidden / heads (Mistral-Nemo, Qwen3) is expressible: q_proj is heads × head_dim wide.
  auto decoupled = small_llama();
  decoupled["head_dim"] = 32;  // 4 heads × 32 != 64
  const auto decoupled_arch = shardplan::architecture_from_hf_config(decoupled, "config.json");
  CHECK(decoupled_arch.head_dim() == 32);
  CHECK(decoupled_arch.q_dim() == 128);
  auto matching = small_llama();
  matching["head_dim"] = 16;  // 4 × 16 == 64: the usual split
  CHECK(shardplan::architecture_from_hf_config(matching, "config.json").explicit_head_dim == 0);

}

TEST_CASE("hf: attention_bias gives o_proj a bias too in Llama and Qwen3, not in Qwen2; mlp_bias biases the MLP") {
  // small_llama: vocab 1000, hidden 64, intermediate 176, 2 layers, 4 heads of 16, 2 kv heads (kv width 32). A block
  // without biases: two norms 2·64, q 64·64, k and v 32·64 each, o 64·64, gate/up/down 3·64·176 = 46,208; the
  // untied embedding and head 2·64,000, the final norm 64: 220,480.
  const auto count = [](const nlohmann::json& document) {
    return shardplan::build_decoder("t", shardplan::architecture_from_hf_config(document, "config.json"), "config.json")
        .param_count();
  };
  auto llama = small_llama();
  CHECK(count(llama) == 220'480);
  // LlamaAttention: q_proj, k_proj, v_proj and o_proj all take bias=config.attention_bias: 64 + 32 + 32 + 64 a block.
  llama["attention_bias"] = true;
  const auto biased = shardplan::build_decoder(
      "t", shardplan::architecture_from_hf_config(llama, "config.json"), "config.json");
  CHECK(biased.param_count() == 220'480 + 2 * (64 + 32 + 32 + 64));
  CHECK(shardplan::testing::has_tensor(biased.layers[1], "self_attn.o_proj.bias", {64}));
  // LlamaMLP: gate_proj, up_proj and down_proj take bias=config.mlp_bias: 176 + 176 + 64 a block.
  llama["mlp_bias"] = true;
  CHECK(count(llama) == 220'480 + 2 * (64 + 32 + 32 + 64) + 2 * (176 + 176 + 64));
  // Qwen3Attention likewise (q_norm and k_norm add 2·16 a block).
  auto qwen3 = small_llama();
  qwen3["architectures"] = nlohmann::json::array({"Qwen3ForCausalLM"});
  qwen3["attention_bias"] = true;
  CHECK(count(qwen3) == 220'480 + 2 * (64 + 32 + 32 + 64) + 2 * (16 + 16));
  // Qwen2Attention: bias=True on q, k, v whatever the config says, never on o_proj.
  auto qwen2 = small_llama();
  qwen2["architectures"] = nlohmann::json::array({"Qwen2ForCausalLM"});
  CHECK(count(qwen2) == 220'480 + 2 * (64 + 32 + 32));
}

TEST_CASE("hf: malformed JSON is reported with the file and line:column") {
  const TemporaryFile file("{\n  \"hidden_size\": 4096,,\n  \"vocab_size\": 32000\n}\n");
  const auto message = input_error_message([&] { shardplan::read_json_file(file.path()); });
  CHECK(contains(message, file.path() + ":2:"));
  CHECK(contains(message, "malformed JSON"));
}

TEST_CASE("hf: detection by keys") {
  CHECK(shardplan::looks_like_hf_config(shardplan::read_json_file("examples/hf/llama3-8b.json")));
  CHECK(shardplan::looks_like_hf_config(nlohmann::json{{"model_type", "gpt2"}}));
  CHECK_FALSE(shardplan::looks_like_hf_config(nlohmann::json{{"layers", nlohmann::json::array()}}));
  CHECK_FALSE(shardplan::looks_like_hf_config(nlohmann::json::array({"architectures"})));
  CHECK_FALSE(shardplan::looks_like_hf_config(nlohmann::json("model_type")));
}
