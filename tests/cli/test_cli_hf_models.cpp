// Tests of issue 35 through the binary: OLMo 2, Granite and GraniteMoE `estimate` and `plan`; a Hub id read from a
// Hugging Face cache laid out in the test (Note [Hub ids]) and the one-line message naming the download command when
// it is missing; --seq-len past max_position_embeddings with a config that names RoPE scaling.
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
