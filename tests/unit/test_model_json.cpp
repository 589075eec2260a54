// Tests of the shardplan model JSON reader: architecture and explicit-layer forms, exact counts, defaults and errors.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cstdint>
#include <string>

#include "errors.h"
#include "json_input.h"
#include "model_json.h"
#include "model_source.h"

namespace {

using nlohmann::json;
using shardplan::InputError;
using shardplan::LayerKind;
using shardplan::ModelSpec;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using shardplan::testing::input_error_message;

ModelSpec load(const json& document) { return shardplan::model_from_json(document, "m.json"); }
std::string load_error(const json& document) {
  return input_error_message([&] { load(document); });
}

// A small llama: vocab 1000, hidden 64, MLP 176, 2 layers, 4 heads of 16, 2 kv heads (kv dim 32).
json small_llama() {
  return json::parse(R"({"schema": "shardplan.model/v1", "name": "small",
    "architecture": {"family": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 176,
                     "num_layers": 2, "num_heads": 4, "num_kv_heads": 2}})");
}

// Explicit layers: an embedding given by tensors, three what-if blocks by size, a norm with two tensors, a tied head.
json small_explicit() {
  return json::parse(R"({"schema": "shardplan.model/v1", "name": "explicit", "hidden_size": 64, "num_heads": 4,
    "vocab_size": 1000,
    "layers": [
      {"name": "embed", "kind": "embedding", "tensors": [{"name": "weight", "shape": [1000, 64]}]},
      {"name": "block", "kind": "transformer_block", "params": 50000, "repeat": 3},
      {"name": "norm", "kind": "norm", "tensors": [{"name": "weight", "shape": [64]}, {"name": "bias", "shape": [64]}]},
      {"name": "head", "kind": "lm_head", "tied_to": "embed"}]})");
}

// Per llama block: two norms 2·64 + q 64·64 + k, v 2·32·64 + o 64·64 + gate, up, down 3·176·64.
constexpr std::int64_t kSmallLlamaBlock = 2 * 64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 176 * 64;  // 46208

}  // namespace

TEST_CASE("architecture form: a llama decoder with exact parameter count and layer names") {
  const ModelSpec model = load(small_llama());
  CHECK(kSmallLlamaBlock == 46208);
  // embed 1000·64 + 2 blocks + final norm 64 + untied head 1000·64.
  CHECK(model.param_count() == 64000 + 2 * kSmallLlamaBlock + 64 + 64000);
  CHECK(model.param_count() == 220480);
  CHECK(model.name == "small");
  REQUIRE(model.layers.size() == 5);
  CHECK(model.layers[0].name == "model.embed_tokens");
  CHECK(model.layers[1].name == "model.layers.0");
  CHECK(model.layers[2].name == "model.layers.1");
  CHECK(model.layers[3].name == "model.norm");
  CHECK(model.layers[4].name == "lm_head");
  CHECK(model.layers[1].param_count() == kSmallLlamaBlock);
  CHECK(model.block_count() == 2);
  CHECK(model.hidden_size == 64);
  CHECK(model.num_heads == 4);
  CHECK(model.vocab_size == 1000);
  REQUIRE(model.architecture.has_value());
  CHECK(model.architecture->num_kv_heads == 2);
  CHECK(model.architecture->kv_dim() == 32);
  // max_position_embeddings defaults to 4096, and the default sequence length follows it.
  CHECK(model.architecture->max_position_embeddings == 4096);
  CHECK(model.default_seq_len == 4096);
}

TEST_CASE("architecture form: defaults (family llama, MLP 4h, kv heads = heads) and overrides") {
  json document = json::parse(R"({"architecture": {"vocab_size": 100, "hidden_size": 32, "num_layers": 1,
                                                   "num_heads": 2, "max_position_embeddings": 256},
                                  "default_seq_len": 128})");
  const ModelSpec model = load(document);
  CHECK(model.name == "custom-model");  // no "name"
  CHECK(model.default_seq_len == 128);
  REQUIRE(model.architecture.has_value());
  CHECK(model.architecture->family == shardplan::DecoderArchitecture::Family::llama);
  CHECK(model.architecture->intermediate_size == 128);
  CHECK(model.architecture->num_kv_heads == 2);
  CHECK_FALSE(model.architecture->tie_word_embeddings);
  // embed 3200 + block (2·32 + 4·32·32 + 3·128·32 = 16448) + norm 32 + head 3200.
  CHECK(model.param_count() == 3200 + 16448 + 32 + 3200);

  document["architecture"]["tie_word_embeddings"] = true;
  const ModelSpec tied = load(document);
  CHECK(tied.param_count() == 3200 + 16448 + 32);
  REQUIRE(tied.layers.back().tied_to_layer.has_value());
  CHECK(*tied.layers.back().tied_to_layer == 0);
  CHECK(tied.layers.back().tensors.empty());
}

TEST_CASE("architecture form: a GPT-2 family model ties its head and has learned positions") {
  const ModelSpec model = load(json::parse(R"({"architecture": {"family": "gpt2", "vocab_size": 1000,
      "hidden_size": 64, "num_layers": 2, "num_heads": 4, "max_position_embeddings": 128}})"));
  // wte 1000·64 + wpe 128·64 + 2 blocks of 12h² + 13h + ln_f 2h; the head is tied to wte.
  CHECK(model.param_count() == 64000 + 8192 + 2 * (12 * 64 * 64 + 13 * 64) + 128);
  CHECK(model.param_count() == 172288);
  REQUIRE(model.layers.size() == 6);
  CHECK(model.layers[0].name == "transformer.wte");
  CHECK(model.layers[1].name == "transformer.wpe");
  CHECK(model.layers[2].name == "transformer.h.0");
  CHECK(model.layers[5].name == "lm_head");
  REQUIRE(model.layers[5].tied_to_layer.has_value());
  CHECK(*model.layers[5].tied_to_layer == 0);
  CHECK(model.architecture->dropout == doctest::Approx(0.1));
}

TEST_CASE("explicit layers: params, tensors, repeat and tied_to give exact counts and names") {
  const ModelSpec model = load(small_explicit());
  // 1000·64 + 3·50000 + (64 + 64) + 0 for the tied head.
  CHECK(model.param_count() == 64000 + 150000 + 128);
  CHECK(model.param_count() == 214128);
  CHECK(model.name == "explicit");
  CHECK_FALSE(model.architecture.has_value());
  CHECK(model.hidden_size == 64);
  CHECK(model.num_heads == 4);
  CHECK(model.vocab_size == 1000);
  CHECK(model.default_seq_len == 2048);
  REQUIRE(model.layers.size() == 6);
  CHECK(model.layers[0].name == "embed");
  CHECK(model.layers[1].name == "block.0");
  CHECK(model.layers[2].name == "block.1");
  CHECK(model.layers[3].name == "block.2");
  CHECK(model.layers[4].name == "norm");
  CHECK(model.layers[5].name == "head");
  CHECK(model.block_count() == 3);
  CHECK(model.layers[0].kind == LayerKind::embedding);
  CHECK(model.layers[2].kind == LayerKind::transformer_block);
  CHECK(model.layers[4].kind == LayerKind::norm);
  CHECK(model.layers[5].kind == LayerKind::lm_head);
  for (std::size_t i = 1; i <= 3; ++i) CHECK(model.layers[i].param_count() == 50000);
  // A what-if layer given by size is one flat tensor.
  REQUIRE(model.layers[1].tensors.size() == 1);
  CHECK(model.layers[1].tensors[0].shape == std::vector<std::int64_t>{50000});
  CHECK(model.layers[4].param_count() == 128);
  REQUIRE(model.layers[5].tied_to_layer.has_value());
  CHECK(*model.layers[5].tied_to_layer == 0);
  CHECK(model.layers[5].param_count() == 0);
}

TEST_CASE("explicit layers: default FLOPs and activations from the layer kind") {
  const ModelSpec model = load(small_explicit());
  const auto& block = model.layers[1];
  // A transformer block given by size: 2 FLOPs per parameter per token, attention 4h per position, Korthikanti's
  // 16h elements, 2h mask bytes, 2a score elements and a score-mask bytes per position, h kept under full AC.
  CHECK(block.flops.matmul_flops_per_token == 100000.0);
  CHECK(block.flops.attention_flops_per_token_per_position == 256.0);
  CHECK(block.activations.elements_per_token == 1024.0);
  CHECK(block.activations.mask_bytes_per_token == 128.0);
  CHECK(block.activations.score_elements_per_token_per_position == 8.0);
  CHECK(block.activations.score_mask_bytes_per_token_per_position == 4.0);
  CHECK(block.activations.checkpoint_elements_per_token == 64.0);
  // The embedding is a lookup; the norm keeps its input; the tied head computes with the embedding's 64000 weights.
  CHECK(model.layers[0].flops.matmul_flops_per_token == 0.0);
  CHECK(model.layers[4].flops.matmul_flops_per_token == 0.0);
  CHECK(model.layers[4].activations.elements_per_token == 64.0);
  CHECK(model.layers[5].flops.matmul_flops_per_token == 128000.0);
  // Forward FLOPs per token at s = 10 without causal skipping: 3·(100000 + 256·10) + 128000.
  CHECK(model.forward_flops_per_token(10, false) == 3.0 * (100000.0 + 2560.0) + 128000.0);
  // Causal skipping halves only the attention part: 3·(100000 + 1280) + 128000.
  CHECK(model.forward_flops_per_token(10, true) == 3.0 * (100000.0 + 1280.0) + 128000.0);
}

TEST_CASE("explicit layers: FLOP and activation overrides replace the defaults") {
  json document = small_explicit();
  document["layers"][1]["matmul_flops_per_token"] = 123;
  document["layers"][1]["attention_flops_per_token_per_position"] = 0;
  document["layers"][1]["activation_elements_per_token"] = 7.5;
  document["layers"][1]["activation_score_elements_per_token_per_position"] = 0;
  document["layers"][1]["repeat"] = 2;
  const ModelSpec model = load(document);
  CHECK(model.layers.size() == 5);
  CHECK(model.layers[1].flops.matmul_flops_per_token == 123.0);
  CHECK(model.layers[2].flops.matmul_flops_per_token == 123.0);
  CHECK(model.layers[1].flops.attention_flops_per_token_per_position == 0.0);
  CHECK(model.layers[1].activations.elements_per_token == 7.5);
  CHECK(model.layers[1].activations.score_elements_per_token_per_position == 0.0);
  CHECK(model.param_count() == 64000 + 100000 + 128);
}

TEST_CASE("explicit layers: a multi-dimensional tensor counts the product of its shape; tied_to may name a copy") {
  const ModelSpec model = load(json::parse(R"({"hidden_size": 8, "num_heads": 2, "layers": [
      {"name": "w", "kind": "other", "tensors": [{"name": "a", "shape": [3, 5, 7]}, {"name": "b", "shape": [11]}]},
      {"name": "blk", "kind": "transformer_block", "params": 10, "repeat": 2},
      {"name": "t1", "kind": "other", "tied_to": "blk.0"},
      {"name": "t2", "kind": "other", "tied_to": "blk"}]})"));
  CHECK(model.layers[0].param_count() == 3 * 5 * 7 + 11);
  CHECK(model.layers[0].kind == LayerKind::other);
  CHECK(model.param_count() == 116 + 20);
  REQUIRE(model.layers.size() == 5);
  CHECK(*model.layers[3].tied_to_layer == 1);  // blk.0
  CHECK(*model.layers[4].tied_to_layer == 2);  // the bare name of a repeated layer means its last copy
  // A tied "other" layer computes with the weight it shares: 2 FLOPs per parameter per token.
  CHECK(model.layers[3].flops.matmul_flops_per_token == 20.0);
}

TEST_CASE("model_from_json requires exactly one of architecture and layers") {
  json both = small_llama();
  both["layers"] = small_explicit()["layers"];
  CHECK(load_error(both) == "m.json: expected exactly one of the fields 'architecture' or 'layers'");
  CHECK(load_error(json::parse(R"({"name": "x", "hidden_size": 64})")) ==
        "m.json: expected exactly one of the fields 'architecture' or 'layers'");
}

TEST_CASE("model_from_json: unknown keys are refused with a suggestion, at every level") {
  json top = small_explicit();
  top["hiden_size"] = 64;
  CHECK(load_error(top) == "m.json: unknown field 'hiden_size' (did you mean 'hidden_size'?)");

  json in_architecture = small_llama();
  in_architecture["architecture"]["num_layer"] = 2;
  CHECK(load_error(in_architecture) == "m.json: unknown field 'architecture.num_layer' (did you mean 'num_layers'?)");

  json in_layer = small_explicit();
  in_layer["layers"][1]["paramz"] = 5;
  CHECK(contains(load_error(in_layer), "unknown field 'layers[1].paramz' (did you mean 'params'"));

  // The architecture form has its own top-level keys: hidden_size belongs inside the block.
  json misplaced = small_llama();
  misplaced["hidden_size"] = 64;
  CHECK(contains(load_error(misplaced), "unknown field 'hidden_size'"));
}

TEST_CASE("model_from_json: tied_to must name an earlier layer") {
  json unknown = small_explicit();
  unknown["layers"][3]["tied_to"] = "embedding";
  CHECK(load_error(unknown) ==
        "m.json: field 'layers[3].tied_to': expected the name of an earlier layer, got \"embedding\"");

  json later = small_explicit();
  later["layers"][0] = json::parse(R"({"name": "head", "kind": "lm_head", "tied_to": "norm"})");
  CHECK(contains(load_error(later), "field 'layers[0].tied_to': expected the name of an earlier layer"));

  // A layer tied to a tied layer has nothing to share.
  json chained = small_explicit();
  chained["layers"].push_back(json::parse(R"({"name": "head2", "kind": "lm_head", "tied_to": "head"})"));
  const std::string message = load_error(chained);
  CHECK(contains(message, "layer 6 ('head2')"));
  CHECK(contains(message, "expected an earlier layer that owns parameters"));
}

TEST_CASE("model_from_json: a layer without a kind is refused, not taken for 'other' (issue 37)") {
  // Reverted (kind defaulting to "other"): the block below loaded as a non-block layer, and plan divided by zero.
  json document = small_explicit();
  document["layers"][1].erase("kind");
  CHECK(load_error(document) == "m.json: missing field 'layers[1].kind' (expected one of embedding, transformer_block, "
                                "norm, lm_head, other)");
}

TEST_CASE("model_from_json: a bad layer kind lists the known kinds") {
  json document = small_explicit();
  document["layers"][1]["kind"] = "transformer_blok";
  CHECK(load_error(document) == "m.json: field 'layers[1].kind': expected one of embedding, transformer_block, norm, "
                                "lm_head, other, got \"transformer_blok\"");
}

TEST_CASE("model_from_json: the schema, when given, must be shardplan.model/v1") {
  json wrong = small_llama();
  wrong["schema"] = "shardplan.model/v2";
  CHECK(load_error(wrong) ==
        "m.json: field 'schema': expected \"shardplan.model/v1\", got \"shardplan.model/v2\"");
  json cluster = small_explicit();
  cluster["schema"] = "shardplan.cluster/v1";
  CHECK(contains(load_error(cluster), "field 'schema': expected \"shardplan.model/v1\""));
  json number = small_explicit();
  number["schema"] = 1;
  CHECK(contains(load_error(number), "field 'schema'"));
  json absent = small_explicit();
  absent.erase("schema");
  CHECK(load(absent).param_count() == 214128);
}

TEST_CASE("model_from_json: layer entry errors name the field path") {
  json both = small_explicit();
  both["layers"][0]["params"] = 5;
  CHECK(load_error(both) == "m.json: field 'layers[0].params': expected either 'tensors' or 'params', not both, got 5");

  json neither = small_explicit();
  neither["layers"][1].erase("params");
  CHECK(load_error(neither) == "m.json: field 'layers[1].tensors': expected 'tensors', 'params' or 'tied_to'");

  json zero_dim = small_explicit();
  zero_dim["layers"][0]["tensors"][0]["shape"] = json::array({1000, 0});
  CHECK(load_error(zero_dim) ==
        "m.json: field 'layers[0].tensors[0].shape': expected positive integers of at most 2^31, got [1000,0]");

  json negative_params = small_explicit();
  negative_params["layers"][1]["params"] = -5;
  CHECK(load_error(negative_params) == "m.json: field 'layers[1].params': expected a positive integer, got -5");

  json no_name = small_explicit();
  no_name["layers"][2].erase("name");
  CHECK(load_error(no_name) == "m.json: missing field 'layers[2].name' (expected a string)");

  json repeat_zero = small_explicit();
  repeat_zero["layers"][1]["repeat"] = 0;
  CHECK(load_error(repeat_zero) == "m.json: field 'layers[1].repeat': expected an integer in 1..10000, got 0");

  json repeat_huge = small_explicit();
  repeat_huge["layers"][1]["repeat"] = 10001;
  CHECK(load_error(repeat_huge) == "m.json: field 'layers[1].repeat': expected an integer in 1..10000, got 10001");

  json negative_flops = small_explicit();
  negative_flops["layers"][1]["matmul_flops_per_token"] = -1;
  CHECK(contains(load_error(negative_flops),
                 "field 'layers[1].matmul_flops_per_token': expected a number in [0, 1e+15]"));

  json empty = small_explicit();
  empty["layers"] = json::array();
  CHECK(load_error(empty) == "m.json: field 'layers': expected a non-empty array, got []");

  json not_object = small_explicit();
  not_object["layers"][2] = "norm";
  CHECK(load_error(not_object) == "m.json: field 'layers[2]': expected a JSON object, got \"norm\"");
}

TEST_CASE("model_from_json: explicit form needs hidden_size and num_heads") {
  json document = small_explicit();
  document.erase("hidden_size");
  CHECK(load_error(document) == "m.json: missing field 'hidden_size' (expected an integer in 1..1000000)");
  json no_heads = small_explicit();
  no_heads["num_heads"] = 0;
  CHECK(load_error(no_heads) == "m.json: field 'num_heads': expected an integer in 1..100000, got 0");
}

TEST_CASE("model_from_json: architecture errors") {
  json missing = small_llama();
  missing["architecture"].erase("hidden_size");
  CHECK(load_error(missing) == "m.json: missing field 'architecture.hidden_size' (expected an integer in 1..1000000)");

  json negative = small_llama();
  negative["architecture"]["num_layers"] = -2;
  CHECK(load_error(negative) == "m.json: field 'architecture.num_layers': expected an integer in 1..10000, got -2");

  json family = small_llama();
  family["architecture"]["family"] = "bert";
  CHECK(load_error(family) == "m.json: field 'architecture.family': expected \"llama\" or \"gpt2\", got \"bert\"");

  json heads = small_llama();
  heads["architecture"]["num_heads"] = 5;
  heads["architecture"]["num_kv_heads"] = 5;
  const std::string message = load_error(heads);
  CHECK(contains(message, "m.json: "));
  CHECK(contains(message, "num_heads"));
  CHECK(contains(message, "divisor of hidden_size 64, got 5"));

  json kv = small_llama();
  kv["architecture"]["num_kv_heads"] = 3;
  CHECK(contains(load_error(kv), "divisor of num_heads 4, got 3"));

  json dropout = small_llama();
  dropout["architecture"]["dropout"] = 1.0;
  CHECK(contains(load_error(dropout), "dropout"));

  json not_object = small_llama();
  not_object["architecture"] = 7;
  CHECK(load_error(not_object) == "m.json: field 'architecture': expected a JSON object, got 7");

  CHECK(load_error(json::array({1})) == "m.json: document: expected a JSON object, got [1]");
}

TEST_CASE("to_json writes name, params and layers with their tensors, tied_to by name") {
  const json written = shardplan::to_json(load(small_explicit()));
  CHECK(written.at("schema") == "shardplan.model/v1");
  CHECK(written.at("name") == "explicit");
  CHECK(written.at("params") == 214128);
  CHECK(written.at("hidden_size") == 64);
  CHECK(written.at("num_heads") == 4);
  REQUIRE(written.at("layers").size() == 6);
  CHECK(written.at("layers")[1].at("name") == "block.0");
  CHECK(written.at("layers")[1].at("kind") == "transformer_block");
  CHECK(written.at("layers")[1].at("tensors") == json::array({{{"name", "flat"}, {"shape", {50000}}}}));
  CHECK(written.at("layers")[5].at("tied_to") == "embed");
  CHECK_FALSE(written.at("layers")[5].contains("tensors"));
  CHECK_FALSE(written.at("layers")[0].contains("tied_to"));
  CHECK(load(written).layers == load(small_explicit()).layers);  // Note [Exact layers]
}

TEST_CASE("the shipped example model files load with their exact parameter counts") {
  // TinyLlama-1.1B's shape: embed and head 32000·2048 each, 22 blocks of
  // 2·2048 + 2·2048² + 2·256·2048 + 3·5632·2048 = 44044288, final norm 2048.
  const ModelSpec llama = shardplan::load_model("examples/models/llama-1b.json");
  CHECK(llama.param_count() == 2 * 32000 * 2048 + 22 * 44044288 + 2048);
  CHECK(llama.param_count() == 1100048384);
  CHECK(llama.name == "llama-1b");
  CHECK(llama.block_count() == 22);
  CHECK(llama.default_seq_len == 2048);

  // What-if: embedding 50000·4096, 24 blocks of 12·4096² given by size, a norm of 4096, the head tied.
  const ModelSpec whatif = shardplan::load_model("examples/models/whatif-explicit.json");
  CHECK(whatif.param_count() == 50000LL * 4096 + 24LL * 12 * 4096 * 4096 + 4096);
  CHECK(whatif.param_count() == 5036642304);
  CHECK(whatif.block_count() == 24);
  CHECK(whatif.layers.size() == 27);
  REQUIRE(whatif.layers.back().tied_to_layer.has_value());
  CHECK(*whatif.layers.back().tied_to_layer == 0);

  // GPT-2 medium's shape (HF gpt2-medium: 354,823,168 parameters): wte, wpe 1024·1024, 24 blocks, ln_f, tied head.
  const ModelSpec gpt2 = shardplan::load_model("examples/models/gpt2-medium-like.json");
  CHECK(gpt2.param_count() == 50257LL * 1024 + 1024LL * 1024 + 24LL * (12 * 1024 * 1024 + 13 * 1024) + 2 * 1024);
  CHECK(gpt2.param_count() == 354823168);
}
