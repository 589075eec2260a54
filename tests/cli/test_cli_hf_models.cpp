// Tests of issue 35 through the binary: OLMo 2, Granite, GraniteMoE, Phi-3.5-MoE, StarCoder2, Falcon, Cohere,
// InternLM2, gpt-oss and Gemma 3 multimodal `estimate` and `plan` (and `run` refusing the block kinds the CPU runtime
// lacks); a Hub id read from a Hugging Face cache laid out in the test (Note [Hub ids]) and the one-line message naming
// the download command when it is missing; --seq-len past max_position_embeddings with a config that names RoPE scaling.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "run_binary.h"
#include "run_json.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using shardplan_test::expect_input_error;
using shardplan_test::run_json;
using shardplan_test::run_shardplan;
using shardplan_test::TempFile;

std::string read_text(const std::string& path) {
  std::ifstream stream(path);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

// HF_HUB_CACHE pointing at a fresh directory for the scope (the binary inherits this process's environment).
class HubCache {
 public:
  HubCache() {
    static int counter = 0;
    root_ = fs::temp_directory_path() / ("shardplan-cli-hub-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(counter++));
    fs::create_directories(root_);
    if (const char* old = std::getenv("HF_HUB_CACHE")) old_ = old;
    ::setenv("HF_HUB_CACHE", root_.c_str(), 1);
  }
  ~HubCache() {
    if (old_.empty()) {
      ::unsetenv("HF_HUB_CACHE");
    } else {
      ::setenv("HF_HUB_CACHE", old_.c_str(), 1);
    }
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  HubCache(const HubCache&) = delete;
  HubCache& operator=(const HubCache&) = delete;
  const fs::path& root() const { return root_; }

  // models--org--name/refs/main → snapshots/<commit>/config.json, as huggingface_hub writes them.
  void add(const std::string& org, const std::string& name, const std::string& config_text) const {
    const std::string commit = "4e20de362430cd3b72f300e6b0f18e50e7166e08";
    const fs::path repository = root_ / ("models--" + org + "--" + name);
    fs::create_directories(repository / "refs");
    std::ofstream(repository / "refs" / "main") << commit;
    fs::create_directories(repository / "snapshots" / commit);
    std::ofstream(repository / "snapshots" / commit / "config.json") << config_text;
  }

 private:
  fs::path root_;
  std::string old_;
};

}  // namespace

TEST_CASE("`estimate` and `plan` OLMo 2 7B, Granite 3.1 2B and GraniteMoE 1B-A400M on 8xH100-80GB") {
  const std::vector<std::pair<std::string, std::int64_t>> models = {
      {"examples/hf/olmo2-7b.json", 7'298'617'344},
      {"examples/hf/granite-3.1-2b.json", 2'533'531'648},
      {"examples/hf/granite-3.0-1b-a400m.json", 1'334'628'352},
  };
  for (const auto& [path, params] : models) {
    CAPTURE(path);
    const json estimate =
        run_json({"estimate", "-m", path, "-c", "8xH100-80GB", "--seq-len", "4096", "--ac", "full", "--json"});
    CHECK(estimate["params"] == params);
    CHECK(estimate["memory"]["fits"] == true);
    const json plan = run_json({"plan", "-m", path, "-c", "8xH100-80GB", "--seq-len", "4096", "--json"});
    CHECK(plan["feasible"] == true);
    CHECK(plan["predicted"]["step_time_s"].get<double>() > 0);
  }
}

TEST_CASE("`estimate` and `plan` Phi-3.5-MoE (41.9B) on 2x8xH100-80GB") {
  const json estimate = run_json({"estimate", "-m", "examples/hf/phi3.5-moe.json", "-c", "2x8xH100-80GB", "--seq-len",
                                  "4096", "--ac", "full", "--json"});
  CHECK(estimate["params"] == 41'873'153'344);
  const json plan =
      run_json({"plan", "-m", "examples/hf/phi3.5-moe.json", "-c", "2x8xH100-80GB", "--seq-len", "4096", "--json"});
  CHECK(plan["feasible"] == true);
}

TEST_CASE("`estimate` and `plan` StarCoder2, Falcon, Cohere (Aya Expanse), InternLM2 and gpt-oss on 8xH100-80GB") {
  const std::vector<std::pair<std::string, std::int64_t>> models = {
      {"examples/hf/starcoder2-3b.json", 3'030'371'328},   {"examples/hf/starcoder2-15b.json", 15'957'889'024},
      {"examples/hf/falcon-7b.json", 6'921'720'704},       {"examples/hf/aya-expanse-8b.json", 8'028'033'024},
      {"examples/hf/internlm2.5-7b.json", 7'737'708'544},  {"examples/hf/gpt-oss-20b.json", 20'914'757'184},
  };
  for (const auto& [path, params] : models) {  // 2048: Falcon-7B's positions
    CAPTURE(path);
    const json estimate =
        run_json({"estimate", "-m", path, "-c", "8xH100-80GB", "--seq-len", "2048", "--ac", "full", "--json"});
    CHECK(estimate["params"] == params);
    CHECK(estimate["memory"]["fits"] == true);
    const json plan = run_json({"plan", "-m", path, "-c", "8xH100-80GB", "--seq-len", "2048", "--json"});
    CHECK(plan["feasible"] == true);
    CHECK(plan["predicted"]["step_time_s"].get<double>() > 0);
  }
  // Falcon-40B (41.3B) on two nodes.
  const json estimate = run_json({"estimate", "-m", "examples/hf/falcon-40b.json", "-c", "2x8xH100-80GB", "--seq-len",
                                  "2048", "--ac", "full", "--json"});
  CHECK(estimate["params"] == 41'303'293'952);
  // StarCoder2's sliding window: past 4096 positions a windowed layer's attention grows linearly, so 16384 tokens
  // cost less than 4x the FLOPs per token of 4096 would with full causal attention.
  const json long_context = run_json({"estimate", "-m", "examples/hf/starcoder2-3b.json", "-c", "8xH100-80GB",
                                      "--seq-len", "16384", "--ac", "full", "--json"});
  CHECK(long_context["params"] == 3'030'371'328);
}

TEST_CASE("`estimate` and `plan` Gemma 3 4B multimodal (SigLIP tower, projector, Gemma 3 text) on 8xH100-80GB") {
  const json estimate = run_json({"estimate", "-m", "examples/hf/gemma3-4b-it.json", "-c", "8xH100-80GB", "--seq-len",
                                  "4096", "--ac", "full", "--json"});
  CHECK(estimate["params"] == 4'300'079'472);
  CHECK(estimate["memory"]["fits"] == true);
  const json plan =
      run_json({"plan", "-m", "examples/hf/gemma3-4b-it.json", "-c", "8xH100-80GB", "--seq-len", "4096", "--json"});
  CHECK(plan["feasible"] == true);
}

TEST_CASE("`run` refuses StarCoder2, Falcon, Cohere, InternLM2, gpt-oss, Gemma 2, Mistral v0.1, Qwen3 and Llama 4 blocks on "
          "the CPU runtime, in one line naming the feature") {
  if (!shardplan_test::mpi_build()) return;
  const json base = {{"vocab_size", 256},       {"hidden_size", 64},        {"intermediate_size", 128},
                     {"num_hidden_layers", 2},  {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                     {"max_position_embeddings", 256}};
  const std::vector<std::pair<json, std::string>> configs = {
      {{{"architectures", {"Starcoder2ForCausalLM"}}, {"sliding_window", 64}}, "two-matrix GELU MLPs"},
      {{{"architectures", {"FalconForCausalLM"}}, {"new_decoder_architecture", true}, {"num_kv_heads", 2}},
       "fused q/k/v"},
      {{{"architectures", {"CohereForCausalLM"}}}, "parallel attention/MLP blocks"},
      {{{"architectures", {"InternLM2ForCausalLM"}}, {"bias", false}}, "fused q/k/v"},
      {{{"architectures", {"GptOssForCausalLM"}}, {"num_local_experts", 4}, {"num_experts_per_tok", 2},
        {"head_dim", 16}, {"sliding_window", 32}},
       "mixture-of-experts blocks (Mixtral, Qwen-MoE, GraniteMoE, Phi-3.5-MoE, gpt-oss)"},
      {{{"architectures", {"Gemma2ForCausalLM"}}, {"head_dim", 16}}, "Gemma 2/3's sandwich norms"},
      {{{"architectures", {"MistralForCausalLM"}}, {"sliding_window", 32}}, "sliding-window attention"},
      {{{"architectures", {"Qwen3ForCausalLM"}}, {"head_dim", 16}}, "q/k norms (Qwen3, OLMo 2, Gemma 3)"},
      // Llama 4 keeps no decoder architecture (its MoE blocks are renamed): refused for its blocks, not taken for
      // an explicit layer list.
      {{{"architectures", {"Llama4ForCausalLM"}}, {"model_type", "llama4_text"}, {"intermediate_size_mlp", 128},
        {"head_dim", 16}, {"num_local_experts", 2}, {"num_experts_per_tok", 1}, {"attention_chunk_size", 32}},
       "mixture-of-experts blocks (Llama 4 and its chunked attention)"},
  };
  for (const auto& [extra, expected] : configs) {
    json config = base;
    config.update(extra);
    CAPTURE(config.dump());
    TempFile plan_file("hf-arch-plan");
    const shardplan_test::RunResult planned =
        run_shardplan({"plan", "-m", config.dump(), "-c", "2xcpu", "--seq-len", "64", "--precision", "fp32", "--out",
                       plan_file.path()});
    INFO(planned.err);
    REQUIRE(planned.exit_status == 0);
    expect_input_error({"run", "-m", config.dump(), "--plan", plan_file.path(), "--device", "cpu", "--steps", "1"},
                       {expected, "not supported by the runtime"});
  }
}

TEST_CASE("`estimate -m org/name` reads the config from the Hugging Face cache; a missing one names the download") {
  const HubCache cache;
  cache.add("allenai", "OLMo-2-1124-7B", read_text("examples/hf/olmo2-7b.json"));
  const json estimate =
      run_json({"estimate", "-m", "allenai/OLMo-2-1124-7B", "-c", "8xH100-80GB", "--seq-len", "4096", "--json"});
  CHECK(estimate["params"] == 7'298'617'344);

  const std::string line = expect_input_error(
      {"estimate", "-m", "meta-llama/Llama-3.1-70B", "-c", "8xH100-80GB"},
      {"--model meta-llama/Llama-3.1-70B: not a file, and its config.json is not in the Hugging Face cache (" +
           cache.root().string() + ")",
       "download it with: hf download meta-llama/Llama-3.1-70B config.json"});
  CHECK(line.ends_with("config.json"));
}

TEST_CASE("--seq-len past max_position_embeddings: refused plainly, allowed up to the reach a rope_scaling names") {
  json config = json::parse(read_text("examples/hf/qwen2-0.5b.json"));
  config["max_position_embeddings"] = 32768;
  expect_input_error({"estimate", "-m", config.dump(), "-c", "8xH100-80GB", "--seq-len", "65536"},
                     {"--seq-len 65536: expected at most the model's 32768 positions", "rope_scaling"});
  config["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  const json estimate =
      run_json({"estimate", "-m", config.dump(), "-c", "8xH100-80GB", "--seq-len", "65536", "--ac", "full", "--json"});
  CHECK(estimate["params"] == 494'032'768);
  // Llama 3.1's preset carries its rope_scaling and 131072 positions.
  CHECK(run_json({"estimate", "-m", "llama3.1-8b", "-c", "8xH100-80GB", "--seq-len", "131072", "--ac", "full",
                  "--json"})["params"] == 8'030'261'248);
}
