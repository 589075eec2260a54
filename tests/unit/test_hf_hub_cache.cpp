// Tests of Note [Hub ids]: a Hub model id read from a Hugging Face cache laid out in the test as huggingface_hub lays
// it out (models--org--name/refs/main naming the snapshot that holds config.json), and the message when it is not.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <unistd.h>

#include "errors.h"
#include "hf_hub_cache.h"
#include "model_source.h"

namespace {

namespace fs = std::filesystem;
using shardplan::testing::input_error_message;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Sets an environment variable for the scope, restoring the previous value (or its absence) afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A temporary directory, removed with everything under it.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("shardplan-hub-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

// A cached snapshot of `org/name` whose config.json is examples/hf/<example>.json, named by refs/main.
void cache_model(const fs::path& cache, const std::string& org, const std::string& name, const std::string& example) {
  const fs::path repository = cache / ("models--" + org + "--" + name);
  write(repository / "refs" / "main", kCommit);  // huggingface_hub writes the commit without a newline
  std::ifstream source("examples/hf/" + example + ".json");
  write(repository / "snapshots" / kCommit / "config.json",
        std::string(std::istreambuf_iterator<char>(source), std::istreambuf_iterator<char>()));
}

}  // namespace

TEST_CASE("hub ids: which arguments are taken for an org/name id") {
  using shardplan::looks_like_hub_model_id;
  CHECK(looks_like_hub_model_id("meta-llama/Llama-3.1-70B"));
  CHECK(looks_like_hub_model_id("Qwen/Qwen2.5-7B-Instruct"));
  CHECK(looks_like_hub_model_id("allenai/OLMo-2-1124-7B@main"));
  CHECK_FALSE(looks_like_hub_model_id("llama3-8b"));              // a preset name
  CHECK_FALSE(looks_like_hub_model_id("examples/hf/gpt2.json"));  // a path
  CHECK_FALSE(looks_like_hub_model_id("models/llama/config"));    // more than one '/'
  CHECK_FALSE(looks_like_hub_model_id("./gpt2"));
  CHECK_FALSE(looks_like_hub_model_id("/gpt2"));
  CHECK_FALSE(looks_like_hub_model_id("org/name.git"));
  CHECK_FALSE(looks_like_hub_model_id("org--x/name"));  // validate_repo_id forbids "--" and ".."
  CHECK_FALSE(looks_like_hub_model_id("org/../name"));
  CHECK_FALSE(looks_like_hub_model_id("org/name@../../etc"));
}

TEST_CASE("hub ids: the cache directory follows huggingface_hub's environment variables") {
  const ScopedEnv hub("HF_HUB_CACHE", std::nullopt), legacy("HUGGINGFACE_HUB_CACHE", std::nullopt),
      home("HF_HOME", std::nullopt), xdg("XDG_CACHE_HOME", std::nullopt), user("HOME", "/home/someone");
  CHECK(shardplan::hf_hub_cache_directory() == fs::path("/home/someone/.cache/huggingface/hub"));
  {
    const ScopedEnv set("XDG_CACHE_HOME", "/xdg");
    CHECK(shardplan::hf_hub_cache_directory() == fs::path("/xdg/huggingface/hub"));
  }
  {
    const ScopedEnv set("HF_HOME", "/data/hf");
    CHECK(shardplan::hf_hub_cache_directory() == fs::path("/data/hf/hub"));
    const ScopedEnv legacy_set("HUGGINGFACE_HUB_CACHE", "/legacy");
    CHECK(shardplan::hf_hub_cache_directory() == fs::path("/legacy"));
    const ScopedEnv newest("HF_HUB_CACHE", "~/hub-cache");
    CHECK(shardplan::hf_hub_cache_directory() == fs::path("/home/someone/hub-cache"));
  }
}

TEST_CASE("hub ids: --model org/name reads config.json from a cache laid out as huggingface_hub lays it out") {
  const TempDir cache;
  const ScopedEnv hub("HF_HUB_CACHE", cache.path().string());
  cache_model(cache.path(), "meta-llama", "Llama-3.1-405B", "llama3.1-405b");
  const shardplan::ModelSpec model = shardplan::load_model("meta-llama/Llama-3.1-405B");
  CHECK(model.name == "Llama-3.1-405B");
  CHECK(model.param_count() == 405'853'388'800);

  const auto found = shardplan::cached_hub_config("meta-llama/Llama-3.1-405B");
  CHECK(found.config_path == cache.path() / "models--meta-llama--Llama-3.1-405B" / "snapshots" / kCommit /
                                 "config.json");

  // A revision after '@': a ref name resolved through refs/, or the commit itself.
  write(cache.path() / "models--meta-llama--Llama-3.1-405B" / "refs" / "v1", kCommit);
  CHECK(shardplan::load_model("meta-llama/Llama-3.1-405B@v1").param_count() == 405'853'388'800);
  CHECK(shardplan::load_model(std::string("meta-llama/Llama-3.1-405B@") + kCommit).param_count() ==
        405'853'388'800);
}

TEST_CASE("hub ids: a model not in the cache names the cache and the one command that downloads its config") {
  const TempDir cache;
  const ScopedEnv hub("HF_HUB_CACHE", cache.path().string());
  const std::string message = input_error_message([] { shardplan::load_model("meta-llama/Llama-3.1-70B"); });
  CHECK(message == "--model meta-llama/Llama-3.1-70B: not a file, and its config.json is not in the Hugging Face "
                   "cache (" + cache.path().string() + "); download it with: hf download meta-llama/Llama-3.1-70B "
                   "config.json");
  CHECK(message.find('\n') == std::string::npos);

  // refs/main names a snapshot that was never downloaded (a partial cache): still missing, not a crash.
  write(cache.path() / "models--meta-llama--Llama-3.1-70B" / "refs" / "main", kCommit);
  CHECK(contains(input_error_message([] { shardplan::load_model("meta-llama/Llama-3.1-70B"); }),
                 "hf download meta-llama/Llama-3.1-70B config.json"));
  // A revision the cache does not have: the command names it.
  CHECK(contains(input_error_message([] { shardplan::load_model("meta-llama/Llama-3.1-70B@v2"); }),
                 "hf download meta-llama/Llama-3.1-70B config.json --revision v2"));
  // A path that merely looks like an id is still read as a file when one exists (examples/hf is a directory: the
  // file name decides), and a missing path with more parts is reported as a file.
  CHECK(contains(input_error_message([] { shardplan::load_model("examples/missing.json"); }),
                 "cannot open file for reading"));
}

TEST_CASE("hub ids: a model's folder (a snapshot, a save_pretrained output) is read through its config.json") {
  const TempDir root;
  std::ifstream source("examples/hf/llama3.2-1b.json");
  write(root.path() / "Llama-3.2-1B" / "config.json",
        std::string(std::istreambuf_iterator<char>(source), std::istreambuf_iterator<char>()));
  for (const std::string& argument : {(root.path() / "Llama-3.2-1B").string(), (root.path() / "Llama-3.2-1B/").string()}) {
    const shardplan::ModelSpec model = shardplan::load_model(argument);
    CHECK(model.name == "Llama-3.2-1B");
    CHECK(model.param_count() == 1'235'814'400);
  }
}
